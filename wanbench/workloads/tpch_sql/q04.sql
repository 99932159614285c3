-- Q4 Order Priority Checking (TPC-H clause 2.4.4)
-- answer: exact exact
-- order: 1
SELECT
    o_orderpriority,
    COUNT(*) AS order_count
FROM orders
WHERE o_orderdate >= DATE '$DATE'
    AND o_orderdate < DATE '$DATE' + INTERVAL 3 MONTH
    AND EXISTS (
        SELECT *
        FROM lineitem
        WHERE l_orderkey = o_orderkey
            AND l_commitdate < l_receiptdate
    )
GROUP BY o_orderpriority
ORDER BY o_orderpriority
