-- Q15 Top Supplier (TPC-H clause 2.4.15)
-- the view revenue0 is a common table expression, so a round runs no DDL
-- answer: exact exact exact exact sum
-- order: 1
WITH revenue0 AS (
    SELECT
        l_suppkey AS supplier_no,
        SUM(l_extendedprice * (1 - l_discount)) AS total_revenue
    FROM lineitem
    WHERE l_shipdate >= DATE '$DATE'
        AND l_shipdate < DATE '$DATE' + INTERVAL 3 MONTH
    GROUP BY l_suppkey
)
SELECT
    s_suppkey,
    s_name,
    s_address,
    s_phone,
    total_revenue
FROM supplier, revenue0
WHERE s_suppkey = supplier_no
    AND total_revenue = (SELECT MAX(total_revenue) FROM revenue0)
ORDER BY s_suppkey
