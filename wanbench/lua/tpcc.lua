#!/usr/bin/env sysbench
-- TPC-C for sysbench 1.0.20: the five transactions, the 45/43/4/4/4 mix,
-- optional keying and think times, and per-type statistics.
--
--   sysbench tpcc.lua --warehouses=1 --threads=4 prepare   (parallel loader)
--   sysbench tpcc.lua --warehouses=1 --threads=4 --time=30 --mysql-ignore-errors=all run
--   sysbench tpcc.lua cleanup
--
-- `run` prints one line per thread at the end:
--   TPCC_STATS {"thread":0,"seconds":..,"types":{"NEW_ORDER":{"count":..,"hist":{..}},..}}
-- which wanbench/workloads/tpcc.py merges into tpmC and go-tpc's [Summary] lines.
-- Latency is one transaction's response time (BEGIN..COMMIT), without keying
-- or think time. Errors are caught per transaction, counted by MySQL error
-- code, rolled back and the terminal goes on (a fault must not end the run).

local script_dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = script_dir .. "?.lua;" .. package.path
local T = require("tpcc_common")

sysbench.cmdline.options = {
   warehouses = { "Number of warehouses", 1 },
   tpcc_wait = { "Keying and think times per TPC-C clause 5.2.5 (off: closed loop, no waits)", false },
   time_scale = { "Multiply keying and think times by this factor (1 = the specification)", 1.0 },
   load_batch = { "Rows per INSERT statement when loading", 500 },
   rollback_pct = { "Percent of New-Orders that use an unused item and roll back", 1 },
}

local TYPES = { "NEW_ORDER", "PAYMENT", "ORDER_STATUS", "DELIVERY", "STOCK_LEVEL" }
local WEIGHTS = { 45, 43, 4, 4, 4 }
-- clause 5.2.5.7: keying time and mean think time (seconds) per type
local KEYING = { 18, 3, 2, 2, 2 }
local THINK = { 12, 12, 10, 5, 5 }

-- ---------------------------------------------------------------- commands

local function connect()
   local drv = sysbench.sql.driver()
   return drv:connect()
end

function cmd_prepare()
   local con = connect()
   T.create_schema(con)
   local units = T.load_units(sysbench.opt.warehouses)
   local threads = sysbench.opt.threads
   local t0 = T.now_us()
   local loaded = 0
   for i, u in ipairs(units) do
      if (i - 1) % threads == sysbench.tid then
         T.load_unit(con, u, sysbench.opt.load_batch)
         loaded = loaded + 1
      end
   end
   io.stdout:write(string.format("TPCC_LOAD %s\n", T.json({ thread = sysbench.tid, units = loaded,
      seconds = (T.now_us() - t0) / 1e6 })))
   io.stdout:flush()
   con:disconnect()
end

function cmd_cleanup()
   local con = connect()
   T.drop_schema(con)
   con:disconnect()
end

sysbench.cmdline.commands = {
   prepare = { cmd_prepare, sysbench.cmdline.PARALLEL_COMMAND },
   cleanup = { cmd_cleanup },
}

-- ------------------------------------------------------------- per thread

local con
local W, home_w, home_d
local stats
local waits = { count = 0, requested_us = 0, actual_us = 0 }
local t_start, deadline
local LOG_BASE = math.log(1.01) -- histogram buckets 1 % wide

local function new_stats()
   local s = {}
   for _, name in ipairs(TYPES) do
      s[name] = { count = 0, sum_us = 0, min_us = -1, max_us = 0, hist = {}, rollbacks = 0,
                  err = { count = 0, sum_us = 0, min_us = -1, max_us = 0, hist = {}, codes = {} } }
   end
   return s
end

local function record(st, us)
   st.count = st.count + 1
   st.sum_us = st.sum_us + us
   if us > st.max_us then st.max_us = us end
   if st.min_us < 0 or us < st.min_us then st.min_us = us end
   local b = math.floor(math.log(math.max(us, 1)) / LOG_BASE)
   local key = tostring(b)
   st.hist[key] = (st.hist[key] or 0) + 1
end

-- The mix: a smooth weighted round robin over 45/43/4/4/4 (a deterministic
-- deck, clause 5.2.4.2): a cycle of 100 cards, and every stretch of a
-- terminal's sequence is within two cards per type of the exact mix. Each
-- terminal starts at a random card of the cycle, every card as likely, so
-- terminals do not move in step and a round of a few transactions per
-- terminal still runs the mix on average. (Before 2026-11-28 the start was
-- random credit scaled by each type's weight, which put the first of the
-- 4 % types 6-20 cards in: at 250 terminals and 5 transactions each, a
-- round ran no Delivery, Order-Status or Stock-Level at all.)
local credit

local function next_type()
   local best
   for t = 1, #WEIGHTS do
      credit[t] = credit[t] + WEIGHTS[t]
      if not best or credit[t] > credit[best] then best = t end
   end
   credit[best] = credit[best] - 100
   return best
end

local function start_deck()
   credit = {}
   for t = 1, #WEIGHTS do
      credit[t] = 0
   end
   for _ = 1, T.rand(0, 99) do
      next_type()
   end
end

function thread_init()
   con = connect()
   W = sysbench.opt.warehouses
   home_w = (sysbench.tid % W) + 1
   home_d = (math.floor(sysbench.tid / W) % T.DISTRICTS) + 1
   stats = new_stats()
   start_deck()
end

-- The clock starts at a thread's first event, not in thread_init: with many
-- threads connecting on a loaded machine, the first ones would otherwise
-- reach their deadline early and run without waits until sysbench stops.
local function start_clock()
   t_start = T.now_us()
   deadline = t_start + (sysbench.opt.time > 0 and sysbench.opt.time * 1e6 or math.huge)
end

function thread_done()
   local out = { thread = sysbench.tid, seconds = t_start and (T.now_us() - t_start) / 1e6 or 0, warehouse = home_w,
                 types = stats, waits = waits }
   io.stdout:write("TPCC_STATS " .. T.json(out) .. "\n")
   io.stdout:flush()
   pcall(function() con:disconnect() end)
end

-- ----------------------------------------------------------- helpers

local function q(sql)
   return con:query(sql)
end

local function row(sql)
   local rs = con:query(sql)
   return rs and rs:fetch_row() or nil
end

local function other_warehouse()
   local w = T.rand(1, W - 1)
   if w >= home_w then w = w + 1 end
   return w
end

local function customer_by_last(w, d, last, lock)
   local rs = q(string.format(
      "SELECT c_id FROM customer WHERE c_w_id=%d AND c_d_id=%d AND c_last='%s' ORDER BY c_first%s",
      w, d, last, lock and " FOR UPDATE" or ""))
   local ids = {}
   for _ = 1, rs.nrows do
      ids[#ids + 1] = tonumber(rs:fetch_row()[1])
   end
   -- clause 2.5.2.2: the row at position ceil(n/2)
   return ids[math.ceil(#ids / 2)]
end

local function pick_customer()
   if T.rand(1, 100) <= 60 then
      return nil, T.lastname(T.nurand(255, 0, 999, T.C_LAST_RUN))
   end
   return T.nurand(1023, 1, T.CUSTOMERS, T.C_ID), nil
end

-- Raised inside New-Order to roll back on purpose (clause 2.4.2.3).
local ROLLBACK = {}

-- ------------------------------------------------------ the transactions

local function new_order()
   local w, d = home_w, T.rand(1, T.DISTRICTS)
   local c = T.nurand(1023, 1, T.CUSTOMERS, T.C_ID)
   local ol_cnt = T.rand(5, 15)
   local rbk = T.rand(1, 100) <= sysbench.opt.rollback_pct
   local lines = {}
   local all_local = 1
   for l = 1, ol_cnt do
      local item = T.nurand(8191, 1, T.ITEMS, T.C_OL_I_ID)
      if rbk and l == ol_cnt then item = T.UNUSED_ITEM end
      local supply = w
      if W > 1 and T.rand(1, 100) == 1 then
         supply = other_warehouse()
         all_local = 0
      end
      lines[l] = { i = item, w = supply, qty = T.rand(1, 10) }
   end
   -- lock stock rows in one order in every terminal: fewer deadlocks
   table.sort(lines, function(a, b) return a.w < b.w or (a.w == b.w and a.i < b.i) end)

   q("BEGIN")
   local r = row(string.format(
      "SELECT c_discount, c_last, c_credit, w_tax FROM customer, warehouse " ..
      "WHERE w_id=%d AND c_w_id=w_id AND c_d_id=%d AND c_id=%d", w, d, c))
   r = row(string.format("SELECT d_next_o_id, d_tax FROM district WHERE d_w_id=%d AND d_id=%d FOR UPDATE", w, d))
   local o_id = tonumber(r[1])
   q(string.format("UPDATE district SET d_next_o_id=%d WHERE d_w_id=%d AND d_id=%d", o_id + 1, w, d))
   q(string.format("INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local) " ..
      "VALUES (%d,%d,%d,%d,NOW(),%d,%d)", o_id, d, w, c, ol_cnt, all_local))
   q(string.format("INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (%d,%d,%d)", o_id, d, w))

   local ids, by_w = {}, {}
   for _, ln in ipairs(lines) do
      ids[#ids + 1] = ln.i
      by_w[ln.w] = by_w[ln.w] or {}
      table.insert(by_w[ln.w], ln.i)
   end
   local prices = {}
   local rs = q("SELECT i_id, i_price, i_name, i_data FROM item WHERE i_id IN (" .. table.concat(ids, ",") .. ")")
   for _ = 1, rs.nrows do
      local ir = rs:fetch_row()
      prices[tonumber(ir[1])] = tonumber(ir[2])
   end
   for _, ln in ipairs(lines) do
      if not prices[ln.i] then error(ROLLBACK) end
   end
   local dist_col = string.format("s_dist_%02d", d)
   local stock = {}
   for sw, items in pairs(by_w) do
      rs = q(string.format("SELECT s_i_id, s_quantity, s_data, %s FROM stock WHERE s_w_id=%d AND s_i_id IN (%s) " ..
         "FOR UPDATE", dist_col, sw, table.concat(items, ",")))
      for _ = 1, rs.nrows do
         local sr = rs:fetch_row()
         stock[sw * 1000000 + tonumber(sr[1])] = { qty = tonumber(sr[2]), dist = sr[4] }
      end
   end
   local values = {}
   for n, ln in ipairs(lines) do
      local s = stock[ln.w * 1000000 + ln.i]
      local left = s.qty - ln.qty
      if left < 10 then left = left + 91 end
      s.qty = left
      q(string.format("UPDATE stock SET s_quantity=%d, s_ytd=s_ytd+%d, s_order_cnt=s_order_cnt+1, " ..
         "s_remote_cnt=s_remote_cnt+%d WHERE s_w_id=%d AND s_i_id=%d",
         left, ln.qty, ln.w ~= w and 1 or 0, ln.w, ln.i))
      values[n] = string.format("(%d,%d,%d,%d,%d,%d,NULL,%d,%.2f,'%s')", o_id, d, w, n, ln.i, ln.w, ln.qty,
         ln.qty * prices[ln.i], s.dist)
   end
   q("INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, " ..
     "ol_quantity, ol_amount, ol_dist_info) VALUES " .. table.concat(values, ","))
   q("COMMIT")
end

local function payment()
   local w, d = home_w, T.rand(1, T.DISTRICTS)
   local cw, cd = w, d
   if W > 1 and T.rand(1, 100) <= 15 then
      cw, cd = other_warehouse(), T.rand(1, T.DISTRICTS)
   end
   local c, last = pick_customer()
   local cents = T.rand(100, 500000)
   local amount = T.money(cents)

   q("BEGIN")
   q(string.format("UPDATE warehouse SET w_ytd=w_ytd+%s WHERE w_id=%d", amount, w))
   local wr = row(string.format("SELECT w_name, w_street_1, w_street_2, w_city, w_state, w_zip FROM warehouse " ..
      "WHERE w_id=%d", w))
   q(string.format("UPDATE district SET d_ytd=d_ytd+%s WHERE d_w_id=%d AND d_id=%d", amount, w, d))
   local dr = row(string.format("SELECT d_name, d_street_1, d_street_2, d_city, d_state, d_zip FROM district " ..
      "WHERE d_w_id=%d AND d_id=%d", w, d))
   if last then
      c = customer_by_last(cw, cd, last, true)
   end
   local cr = row(string.format("SELECT c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, " ..
      "c_zip, c_phone, c_credit, c_credit_lim, c_discount, c_balance, c_since FROM customer " ..
      "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d FOR UPDATE", cw, cd, c))
   if cr[10] == "BC" then
      local info = string.format("%d %d %d %d %d %s|", c, cd, cw, d, w, amount)
      q(string.format("UPDATE customer SET c_balance=c_balance-%s, c_ytd_payment=c_ytd_payment+%s, " ..
         "c_payment_cnt=c_payment_cnt+1, c_data=SUBSTRING(CONCAT('%s', c_data), 1, 500) " ..
         "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", amount, amount, info, cw, cd, c))
   else
      q(string.format("UPDATE customer SET c_balance=c_balance-%s, c_ytd_payment=c_ytd_payment+%s, " ..
         "c_payment_cnt=c_payment_cnt+1 WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", amount, amount, cw, cd, c))
   end
   q(string.format("INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data) " ..
      "VALUES (%d,%d,%d,%d,%d,NOW(),%s,'%s')", c, cd, cw, d, w, amount, wr[1] .. "    " .. dr[1]))
   q("COMMIT")
end

local function order_status()
   local w, d = home_w, T.rand(1, T.DISTRICTS)
   local c, last = pick_customer()
   q("BEGIN")
   if last then
      c = customer_by_last(w, d, last, false)
   end
   row(string.format("SELECT c_balance, c_first, c_middle, c_last FROM customer " ..
      "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%d", w, d, c))
   local o = row(string.format("SELECT o_id, o_carrier_id, o_entry_d FROM orders " ..
      "WHERE o_w_id=%d AND o_d_id=%d AND o_c_id=%d ORDER BY o_id DESC LIMIT 1", w, d, c))
   if o then
      q(string.format("SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line " ..
         "WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%s", w, d, o[1]))
   end
   q("COMMIT")
end

local function delivery()
   local w = home_w
   local carrier = T.rand(1, 10)
   q("BEGIN")
   for d = 1, T.DISTRICTS do
      local no = row(string.format("SELECT no_o_id FROM new_order WHERE no_w_id=%d AND no_d_id=%d " ..
         "ORDER BY no_o_id LIMIT 1 FOR UPDATE", w, d))
      if no then
         local o_id = no[1]
         q(string.format("DELETE FROM new_order WHERE no_w_id=%d AND no_d_id=%d AND no_o_id=%s", w, d, o_id))
         local o = row(string.format("SELECT o_c_id FROM orders WHERE o_w_id=%d AND o_d_id=%d AND o_id=%s",
            w, d, o_id))
         q(string.format("UPDATE orders SET o_carrier_id=%d WHERE o_w_id=%d AND o_d_id=%d AND o_id=%s",
            carrier, w, d, o_id))
         q(string.format("UPDATE order_line SET ol_delivery_d=NOW() WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%s",
            w, d, o_id))
         local s = row(string.format("SELECT COALESCE(SUM(ol_amount), 0) FROM order_line " ..
            "WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id=%s", w, d, o_id))
         q(string.format("UPDATE customer SET c_balance=c_balance+%s, c_delivery_cnt=c_delivery_cnt+1 " ..
            "WHERE c_w_id=%d AND c_d_id=%d AND c_id=%s", s[1], w, d, o[1]))
      end
   end
   q("COMMIT")
end

local function stock_level()
   local w, d = home_w, home_d
   local threshold = T.rand(10, 20)
   local r = row(string.format("SELECT d_next_o_id FROM district WHERE d_w_id=%d AND d_id=%d", w, d))
   local next_o = tonumber(r[1])
   row(string.format("SELECT COUNT(DISTINCT s_i_id) FROM order_line, stock " ..
      "WHERE ol_w_id=%d AND ol_d_id=%d AND ol_o_id<%d AND ol_o_id>=%d " ..
      "AND s_w_id=%d AND s_i_id=ol_i_id AND s_quantity<%d", w, d, next_o, next_o - 20, w, threshold))
end

local TXNS = { new_order, payment, order_status, delivery, stock_level }

-- --------------------------------------------------------------- event

-- Connection-level MySQL client errors after which the connection is dead.
local LOST = { [2006] = true, [2013] = true, [2055] = true, [2011] = true, [2002] = true, [2003] = true }

-- Sleeps are measured: a loaded client oversleeps, which lowers efficiency
-- without the database being slower; the report shows by how much.
local function wait_s(seconds)
   local us = seconds * sysbench.opt.time_scale * 1e6
   local t0 = T.now_us()
   local left = deadline - t0
   if us > left then us = math.max(left, 0) end
   T.sleep_us(us)
   waits.count = waits.count + 1
   waits.requested_us = waits.requested_us + us
   waits.actual_us = waits.actual_us + (T.now_us() - t0)
end

local function think_time(mean)
   -- negative exponential, truncated at 10x the mean (clause 5.2.5.4)
   local r = sysbench.rand.uniform_double()
   local t = -math.log(r > 0 and r or 1e-12) * mean
   return math.min(t, 10 * mean)
end

function event()
   if not t_start then start_clock() end
   if T.now_us() >= deadline then
      return true -- this terminal is done; sysbench ends the thread
   end
   local t = next_type()
   local name = TYPES[t]
   local st = stats[name]
   if sysbench.opt.tpcc_wait then
      wait_s(KEYING[t])
      if T.now_us() >= deadline then
         return true -- keying ran into the end of the run: no transaction
      end
   end
   local t0 = T.now_us()
   local ok, err = pcall(TXNS[t])
   local us = T.now_us() - t0
   if ok then
      record(st, us)
   elseif err == ROLLBACK then
      pcall(q, "ROLLBACK")
      us = T.now_us() - t0
      record(st, us)
      st.rollbacks = st.rollbacks + 1
   elseif type(err) == "table" and err.sql_errno then
      local code = tostring(err.sql_errno)
      st.err.codes[code] = (st.err.codes[code] or 0) + 1
      record(st.err, us)
      if LOST[err.sql_errno] then
         pcall(function() con:reconnect() end)
      else
         pcall(q, "ROLLBACK")
      end
   else
      error(err, 0)
   end
   if sysbench.opt.tpcc_wait then
      wait_s(think_time(THINK[t]))
   end
end

-- sysbench's own per-event numbers include the waits: keep its report short.
function sysbench.hooks.report_intermediate(_) end
