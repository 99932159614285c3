-- TPC-C for sysbench 1.0.20 (LuaJIT): schema, random data and the loader.
--
-- Shared by tpcc.lua (commands and the five transactions). Everything here
-- follows TPC-C 5.11 clause 4.3.3.1 (initial population) and clause 2.1.6
-- (NURand). Random text comes from a per-thread pool of letters: the loader
-- must build ~500k rows per warehouse in seconds on two cores, and a slice
-- of a random pool is as good as fresh randomness for the database.

local ffi = require("ffi")

local M = {}

M.DISTRICTS = 10
M.CUSTOMERS = 3000          -- per district
M.ITEMS = 100000
M.ORDERS = 3000             -- per district
M.FIRST_UNDELIVERED = 2101  -- orders >= this are in new_order at load
M.UNUSED_ITEM = M.ITEMS + 1 -- the New-Order rollback item (clause 2.4.1.4)

-- NURand C constants (clause 2.1.6.1): C_LAST at run time differs from the
-- load constant by 66, inside the allowed [65, 119] and not 96 or 112.
M.C_LAST_LOAD = 157
M.C_LAST_RUN = 223
M.C_ID = 259
M.C_OL_I_ID = 7911

pcall(ffi.cdef, [[
struct tpcc_timespec { long tv_sec; long tv_nsec; };
int clock_gettime(int clk_id, struct tpcc_timespec *tp);
int usleep(unsigned int usec);
]])
local ts = ffi.new("struct tpcc_timespec")

-- Monotonic clock in microseconds.
function M.now_us()
   ffi.C.clock_gettime(1, ts)
   return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

-- Sleep for us microseconds, in slices of at most 0.5 s (usleep's limit is 1 s).
function M.sleep_us(us)
   while us > 0 do
      local slice = math.min(us, 500000)
      ffi.C.usleep(math.floor(slice))
      us = us - slice
   end
end

local rand = sysbench.rand.uniform

function M.rand(a, b)
   return rand(a, b)
end

-- NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x
function M.nurand(A, x, y, C)
   return ((bit.bor(rand(0, A), rand(x, y)) + C) % (y - x + 1)) + x
end

local SYLLABLES = { "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING" }

-- C_LAST from a number 0..999 (clause 4.3.2.3).
function M.lastname(n)
   return SYLLABLES[math.floor(n / 100) + 1] .. SYLLABLES[math.floor(n / 10) % 10 + 1] .. SYLLABLES[n % 10 + 1]
end

-- Random text pools, built lazily per Lua state (each sysbench thread has its own).
local alpha_pool, digit_pool
local POOL = 16384

local function pools()
   if not alpha_pool then
      alpha_pool = sysbench.rand.string(string.rep("@", POOL))
      digit_pool = sysbench.rand.string(string.rep("#", POOL))
   end
end

-- a-string of random length in [lo, hi]
function M.astr(lo, hi)
   pools()
   local len = hi and rand(lo, hi) or lo
   local off = rand(1, POOL - len)
   return alpha_pool:sub(off, off + len - 1)
end

-- n-string (digits) of length len
function M.nstr(len)
   pools()
   local off = rand(1, POOL - len)
   return digit_pool:sub(off, off + len - 1)
end

function M.zip()
   return M.nstr(4) .. "11111"
end

-- I_DATA / S_DATA: 26..50 chars, 10% contain "ORIGINAL" (clause 4.3.3.1).
function M.data_with_original()
   local s = M.astr(26, 50)
   if rand(1, 100) <= 10 then
      local pos = rand(1, #s - 8 + 1)
      s = s:sub(1, pos - 1) .. "ORIGINAL" .. s:sub(pos + 8)
   end
   return s
end

-- Fixed-point money "123.45" from cents.
function M.money(cents)
   return string.format("%d.%02d", math.floor(cents / 100), cents % 100)
end

-- Decimal with 4 places from an integer of ten-thousandths: tax, discount.
function M.frac4(n)
   return string.format("0.%04d", n)
end

M.SCHEMA = {
   { "warehouse", [[CREATE TABLE IF NOT EXISTS warehouse (
      w_id INT NOT NULL, w_name VARCHAR(10), w_street_1 VARCHAR(20), w_street_2 VARCHAR(20),
      w_city VARCHAR(20), w_state CHAR(2), w_zip CHAR(9), w_tax DECIMAL(4,4), w_ytd DECIMAL(12,2),
      PRIMARY KEY (w_id))]] },
   { "district", [[CREATE TABLE IF NOT EXISTS district (
      d_id INT NOT NULL, d_w_id INT NOT NULL, d_name VARCHAR(10), d_street_1 VARCHAR(20),
      d_street_2 VARCHAR(20), d_city VARCHAR(20), d_state CHAR(2), d_zip CHAR(9),
      d_tax DECIMAL(4,4), d_ytd DECIMAL(12,2), d_next_o_id INT,
      PRIMARY KEY (d_w_id, d_id))]] },
   { "customer", [[CREATE TABLE IF NOT EXISTS customer (
      c_id INT NOT NULL, c_d_id INT NOT NULL, c_w_id INT NOT NULL, c_first VARCHAR(16),
      c_middle CHAR(2), c_last VARCHAR(16), c_street_1 VARCHAR(20), c_street_2 VARCHAR(20),
      c_city VARCHAR(20), c_state CHAR(2), c_zip CHAR(9), c_phone CHAR(16), c_since DATETIME,
      c_credit CHAR(2), c_credit_lim DECIMAL(12,2), c_discount DECIMAL(4,4),
      c_balance DECIMAL(12,2), c_ytd_payment DECIMAL(12,2), c_payment_cnt INT,
      c_delivery_cnt INT, c_data VARCHAR(500),
      PRIMARY KEY (c_w_id, c_d_id, c_id),
      INDEX idx_customer (c_w_id, c_d_id, c_last, c_first))]] },
   { "history", [[CREATE TABLE IF NOT EXISTS history (
      h_id BIGINT NOT NULL AUTO_INCREMENT,
      h_c_id INT, h_c_d_id INT, h_c_w_id INT, h_d_id INT, h_w_id INT, h_date DATETIME,
      h_amount DECIMAL(6,2), h_data VARCHAR(24),
      PRIMARY KEY (h_id),
      INDEX idx_h_w (h_w_id, h_d_id),
      INDEX idx_h_c (h_c_w_id, h_c_d_id, h_c_id))]] },
   { "new_order", [[CREATE TABLE IF NOT EXISTS new_order (
      no_o_id INT NOT NULL, no_d_id INT NOT NULL, no_w_id INT NOT NULL,
      PRIMARY KEY (no_w_id, no_d_id, no_o_id))]] },
   { "orders", [[CREATE TABLE IF NOT EXISTS orders (
      o_id INT NOT NULL, o_d_id INT NOT NULL, o_w_id INT NOT NULL, o_c_id INT,
      o_entry_d DATETIME, o_carrier_id INT, o_ol_cnt INT, o_all_local INT,
      PRIMARY KEY (o_w_id, o_d_id, o_id),
      INDEX idx_order (o_w_id, o_d_id, o_c_id, o_id))]] },
   { "order_line", [[CREATE TABLE IF NOT EXISTS order_line (
      ol_o_id INT NOT NULL, ol_d_id INT NOT NULL, ol_w_id INT NOT NULL, ol_number INT NOT NULL,
      ol_i_id INT, ol_supply_w_id INT, ol_delivery_d DATETIME, ol_quantity INT,
      ol_amount DECIMAL(6,2), ol_dist_info CHAR(24),
      PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))]] },
   { "item", [[CREATE TABLE IF NOT EXISTS item (
      i_id INT NOT NULL, i_im_id INT, i_name VARCHAR(24), i_price DECIMAL(5,2), i_data VARCHAR(50),
      PRIMARY KEY (i_id))]] },
   { "stock", [[CREATE TABLE IF NOT EXISTS stock (
      s_i_id INT NOT NULL, s_w_id INT NOT NULL, s_quantity INT,
      s_dist_01 CHAR(24), s_dist_02 CHAR(24), s_dist_03 CHAR(24), s_dist_04 CHAR(24),
      s_dist_05 CHAR(24), s_dist_06 CHAR(24), s_dist_07 CHAR(24), s_dist_08 CHAR(24),
      s_dist_09 CHAR(24), s_dist_10 CHAR(24), s_ytd INT, s_order_cnt INT, s_remote_cnt INT,
      s_data VARCHAR(50),
      PRIMARY KEY (s_w_id, s_i_id))]] },
}

function M.create_schema(con)
   for _, t in ipairs(M.SCHEMA) do
      con:query(t[2])
   end
end

function M.drop_schema(con)
   for _, t in ipairs(M.SCHEMA) do
      con:query("DROP TABLE IF EXISTS " .. t[1])
   end
end

-- Multi-row INSERT in batches of `batch` rows, one autocommit statement each.
local Inserter = {}
Inserter.__index = Inserter

function M.inserter(con, head, batch)
   return setmetatable({ con = con, head = head, batch = batch, rows = {}, n = 0 }, Inserter)
end

function Inserter:add(row)
   self.n = self.n + 1
   self.rows[self.n] = row
   if self.n >= self.batch then
      self:flush()
   end
end

function Inserter:flush()
   if self.n > 0 then
      self.con:query(self.head .. table.concat(self.rows, ",", 1, self.n))
      self.n = 0
   end
end

local function load_items(con, lo, hi, batch)
   local ins = M.inserter(con, "INSERT INTO item (i_id, i_im_id, i_name, i_price, i_data) VALUES ", batch)
   for i = lo, hi do
      ins:add(string.format("(%d,%d,'%s',%s,'%s')", i, rand(1, 10000), M.astr(14, 24),
         M.money(rand(100, 10000)), M.data_with_original()))
   end
   ins:flush()
end

local function load_warehouse(con, w)
   con:query(string.format(
      "INSERT INTO warehouse VALUES (%d,'%s','%s','%s','%s','%s','%s',%s,300000.00)",
      w, M.astr(6, 10), M.astr(10, 20), M.astr(10, 20), M.astr(10, 20), M.astr(2), M.zip(),
      M.frac4(rand(0, 2000))))
   local ins = M.inserter(con, "INSERT INTO district VALUES ", M.DISTRICTS)
   for d = 1, M.DISTRICTS do
      ins:add(string.format("(%d,%d,'%s','%s','%s','%s','%s','%s',%s,30000.00,%d)",
         d, w, M.astr(6, 10), M.astr(10, 20), M.astr(10, 20), M.astr(10, 20), M.astr(2), M.zip(),
         M.frac4(rand(0, 2000)), M.ORDERS + 1))
   end
   ins:flush()
end

local function load_stock(con, w, lo, hi, batch)
   local ins = M.inserter(con, "INSERT INTO stock VALUES ", batch)
   for i = lo, hi do
      ins:add(string.format("(%d,%d,%d,'%s','%s','%s','%s','%s','%s','%s','%s','%s','%s',0,0,0,'%s')",
         i, w, rand(10, 100), M.astr(24), M.astr(24), M.astr(24), M.astr(24), M.astr(24),
         M.astr(24), M.astr(24), M.astr(24), M.astr(24), M.astr(24), M.data_with_original()))
   end
   ins:flush()
end

-- One district: its customers, history, orders, order lines and new orders.
local function load_district(con, w, d, batch)
   local cust = M.inserter(con, "INSERT INTO customer VALUES ", batch)
   local hist = M.inserter(con,
      "INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data) VALUES ", batch)
   for c = 1, M.CUSTOMERS do
      local last
      if c <= 1000 then
         last = M.lastname(c - 1)
      else
         last = M.lastname(M.nurand(255, 0, 999, M.C_LAST_LOAD))
      end
      cust:add(string.format(
         "(%d,%d,%d,'%s','OE','%s','%s','%s','%s','%s','%s','%s',NOW(),'%s',50000.00,%s,-10.00,10.00,1,0,'%s')",
         c, d, w, M.astr(8, 16), last, M.astr(10, 20), M.astr(10, 20), M.astr(10, 20), M.astr(2),
         M.zip(), M.nstr(16), rand(1, 100) <= 10 and "BC" or "GC", M.frac4(rand(0, 5000)),
         M.astr(300, 500)))
      hist:add(string.format("(%d,%d,%d,%d,%d,NOW(),10.00,'%s')", c, d, w, d, w, M.astr(12, 24)))
   end
   cust:flush()
   hist:flush()

   -- o_c_id is a random permutation of the customer ids (clause 4.3.3.1).
   local perm = {}
   for i = 1, M.CUSTOMERS do
      perm[i] = i
   end
   for i = M.CUSTOMERS, 2, -1 do
      local j = rand(1, i)
      perm[i], perm[j] = perm[j], perm[i]
   end
   local ord = M.inserter(con, "INSERT INTO orders VALUES ", batch)
   local lines = M.inserter(con, "INSERT INTO order_line VALUES ", batch)
   local newo = M.inserter(con, "INSERT INTO new_order VALUES ", batch)
   for o = 1, M.ORDERS do
      local ol_cnt = rand(5, 15)
      local delivered = o < M.FIRST_UNDELIVERED
      ord:add(string.format("(%d,%d,%d,%d,NOW(),%s,%d,1)", o, d, w, perm[o],
         delivered and tostring(rand(1, 10)) or "NULL", ol_cnt))
      for l = 1, ol_cnt do
         lines:add(string.format("(%d,%d,%d,%d,%d,%d,%s,5,%s,'%s')", o, d, w, l, rand(1, M.ITEMS), w,
            delivered and "NOW()" or "NULL", delivered and "0.00" or M.money(rand(1, 999999)), M.astr(24)))
      end
      if not delivered then
         newo:add(string.format("(%d,%d,%d)", o, d, w))
      end
   end
   ord:flush()
   lines:flush()
   newo:flush()
end

-- Units of loading work, in a fixed order every thread computes the same way:
-- thread t loads units t+1, t+1+T, ... Items once; per warehouse one unit for
-- the warehouse + districts, ten stock slices and ten district units.
function M.load_units(warehouses)
   local units = {}
   local slice = M.ITEMS / 10
   for k = 0, 9 do
      units[#units + 1] = { kind = "item", lo = k * slice + 1, hi = (k + 1) * slice }
   end
   for w = 1, warehouses do
      units[#units + 1] = { kind = "warehouse", w = w }
      for d = 1, M.DISTRICTS do
         units[#units + 1] = { kind = "district", w = w, d = d }
      end
      for k = 0, 9 do
         units[#units + 1] = { kind = "stock", w = w, lo = k * slice + 1, hi = (k + 1) * slice }
      end
   end
   -- district units are the heaviest: interleave them so threads get equal shares
   table.sort(units, function(a, b)
      local order = { district = 1, stock = 2, item = 3, warehouse = 4 }
      if order[a.kind] ~= order[b.kind] then
         return order[a.kind] < order[b.kind]
      end
      return (a.w or 0) * 1e7 + (a.d or 0) * 1e6 + (a.lo or 0) < (b.w or 0) * 1e7 + (b.d or 0) * 1e6 + (b.lo or 0)
   end)
   return units
end

function M.load_unit(con, u, batch)
   if u.kind == "item" then
      load_items(con, u.lo, u.hi, batch)
   elseif u.kind == "warehouse" then
      load_warehouse(con, u.w)
   elseif u.kind == "stock" then
      load_stock(con, u.w, u.lo, u.hi, batch)
   else
      load_district(con, u.w, u.d, batch)
   end
end

-- Minimal JSON encoder: numbers, strings, booleans, nested tables. A table
-- with t[1] ~= nil is an array; keys of objects are turned into strings.
local function encode(v, out)
   local tv = type(v)
   if tv == "table" then
      if v[1] ~= nil then
         out[#out + 1] = "["
         for i, x in ipairs(v) do
            if i > 1 then out[#out + 1] = "," end
            encode(x, out)
         end
         out[#out + 1] = "]"
      else
         out[#out + 1] = "{"
         local first = true
         for k, x in pairs(v) do
            if not first then out[#out + 1] = "," end
            first = false
            encode(tostring(k), out)
            out[#out + 1] = ":"
            encode(x, out)
         end
         out[#out + 1] = "}"
      end
   elseif tv == "string" then
      out[#out + 1] = '"' .. v:gsub('[%c"\\]', function(c)
         return string.format("\\u%04x", c:byte())
      end) .. '"'
   elseif tv == "number" then
      if v ~= v or v == math.huge or v == -math.huge then
         out[#out + 1] = "null"
      elseif v == math.floor(v) and math.abs(v) < 1e15 then
         out[#out + 1] = string.format("%d", v)
      else
         out[#out + 1] = string.format("%.17g", v)
      end
   elseif tv == "boolean" then
      out[#out + 1] = tostring(v)
   else
      out[#out + 1] = "null"
   end
end

function M.json(v)
   local out = {}
   encode(v, out)
   return table.concat(out)
end

return M
