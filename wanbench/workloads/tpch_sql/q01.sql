-- Q1 Pricing Summary Report (TPC-H clause 2.4.1)
-- answer: exact exact exact sum sum sum avg avg avg exact
-- order: 1 2
SELECT
    l_returnflag,
    l_linestatus,
    SUM(l_quantity) AS sum_qty,
    SUM(l_extendedprice) AS sum_base_price,
    SUM(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
    SUM(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
    AVG(l_quantity) AS avg_qty,
    AVG(l_extendedprice) AS avg_price,
    AVG(l_discount) AS avg_disc,
    COUNT(*) AS count_order
FROM lineitem
WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL $DELTA DAY
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus
