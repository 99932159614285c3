#!/usr/bin/env sysbench
-- YCSB core workloads A-F for sysbench 1.0.20 (LuaJIT), as YCSB's CoreWorkload
-- defines them, on a MySQL-protocol database.
--
--   sysbench ycsb.lua --records=1000 --threads=4 prepare        (parallel load)
--   sysbench ycsb.lua --records=1000 --workload=a --threads=8 --time=10 \
--       --events=0 --mysql-ignore-errors=all run
--
-- The table is YCSB's usertable: YCSB_KEY = "user" .. fnvhash64(keynum)
-- (CoreWorkload.buildKeyName with insertorder=hashed, zeropadding=1) and
-- FIELD0..FIELDn-1 of --field-length characters. wanbench/workloads/ycsb.py
-- creates the table; this script loads and runs it.
--
-- Key choice follows YCSB exactly:
--   zipfian: ScrambledZipfianGenerator(0, records + expectednewkeys): a
--     ZipfianGenerator over [0, 10^10] with constant 0.99 and YCSB's
--     precomputed zeta (26.46902820178302), the item hashed with FNV-1a 64
--     and taken mod the key space; keys beyond the last acknowledged insert
--     are drawn again (CoreWorkload.nextKeynum).
--   latest (D): SkewedLatestGenerator: last acknowledged key minus a
--     ZipfianGenerator draw over the keys inserted so far (zeta grown
--     incrementally as YCSB does).
--   uniform: the field an update writes; the scan length (1..--max-scan-length).
--
-- Inserts: thread t inserts keynums records + t, records + t + T, ...; each
-- thread publishes how many it has finished in a shared memory slot, and the
-- acknowledged limit is records - 1 + T * (fewest finished by any thread),
-- YCSB's AcknowledgedCounterGenerator over the threads of one process.
--
-- Each thread prints YCSB_STATS {...} when it ends (per operation: count,
-- sum, min, max, 1 % log histogram; errors per MySQL error code) and writes
-- into $WB_SCRATCH: inserts-<tid>.txt (keynums of acknowledged inserts),
-- unsure-<tid>.txt (inserts whose connection died: outcome unknown) and,
-- with --key-stats, keys-<tid>.txt ("keynum count" of every chosen key).

local script_dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = script_dir .. "?.lua;" .. package.path
local T = require("tpcc_common")
local ffi = require("ffi")

sysbench.cmdline.options = {
   records = { "Records loaded (YCSB recordcount)", 1000 },
   fields = { "Fields per record (YCSB fieldcount)", 10 },
   field_length = { "Characters per field (YCSB fieldlength)", 100 },
   workload = { "Core workload: a, b, c, d, e or f", "a" },
   key_space = { "Items of the scrambled zipfian: records + expected new keys + 1", 0 },
   latest_zetan = { "zeta(records - 1, 0.99), precomputed for the latest distribution", 0 },
   max_scan_length = { "Longest scan (YCSB maxscanlength); lengths are uniform from 1", 100 },
   load_batch = { "Rows per INSERT statement when loading", 200 },
   key_stats = { "Count how often each key is chosen (for the distribution self-test)", false },
}

-- YCSB's workloads/workload[a-f]: proportions and request distribution
local WORKLOADS = {
   a = { mix = { READ = 0.5, UPDATE = 0.5 }, dist = "zipfian" },
   b = { mix = { READ = 0.95, UPDATE = 0.05 }, dist = "zipfian" },
   c = { mix = { READ = 1.0 }, dist = "zipfian" },
   d = { mix = { READ = 0.95, INSERT = 0.05 }, dist = "latest" },
   e = { mix = { SCAN = 0.95, INSERT = 0.05 }, dist = "zipfian" },
   f = { mix = { READ = 0.5, READ_MODIFY_WRITE = 0.5 }, dist = "zipfian" },
}
local ORDER = { "READ", "UPDATE", "INSERT", "SCAN", "READ_MODIFY_WRITE" }
-- errors after which the connection is gone and a write's outcome is unknown
local LOST = { [2006] = true, [2013] = true, [2055] = true, [2011] = true, [2002] = true, [2003] = true }

-- ------------------------------------------------------------ YCSB's math

local FNV_OFFSET = 0xCBF29CE484222325ULL
local FNV_PRIME = 1099511628211ULL
local SIGN = 0x8000000000000000ULL

-- Utils.fnvhash64: FNV-1a over the 8 low-to-high bytes, then Math.abs of the
-- signed result. Returns a uint64 cdata.
local function fnv64(n)
   local v = ffi.cast("uint64_t", n)
   local h = FNV_OFFSET
   for _ = 1, 8 do
      local octet = v % 256ULL
      v = v / 256ULL
      h = bit.bxor(h, octet)
      h = h * FNV_PRIME
   end
   if h >= SIGN then h = 0ULL - h end
   return h
end

local function key_name(keynum)
   return "user" .. tostring(fnv64(keynum)):gsub("ULL$", "")
end

local THETA = 0.99
local ZETA2 = 1 + math.pow(0.5, THETA)
local ALPHA = 1 / (1 - THETA)
local HALF_POW = math.pow(0.5, THETA)
local uniform01 = sysbench.rand.uniform_double

-- ZipfianGenerator(min=0, max=items-1, 0.99, zetan): Gray et al.'s method,
-- as in YCSB (eta keeps the constructor's item count, as YCSB's does).
local function zipfian(items, zetan)
   local z = { items = items, count = items, zetan = zetan }
   z.eta = (1 - math.pow(2.0 / items, 1 - THETA)) / (1 - ZETA2 / zetan)
   return z
end

local function zipf_next(z, itemcount)
   if itemcount > z.count then -- grown: add the new terms, as YCSB does
      local sum = z.zetan
      for i = z.count, itemcount - 1 do
         sum = sum + 1 / math.pow(i + 1, THETA)
      end
      z.zetan, z.count = sum, itemcount
      z.eta = (1 - math.pow(2.0 / z.items, 1 - THETA)) / (1 - ZETA2 / z.zetan)
   end
   local u = uniform01()
   local uz = u * z.zetan
   if uz < 1.0 then return 0 end
   if uz < 1.0 + HALF_POW then return 1 end
   return math.floor(itemcount * math.pow(z.eta * u - z.eta + 1, ALPHA))
end

-- ScrambledZipfianGenerator: ZETAN and ITEM_COUNT are YCSB's constants
local SCRAMBLE_ITEMS = 10000000000 + 1 -- ZipfianGenerator(0, ITEM_COUNT): both ends
local SCRAMBLE_ZETAN = 26.46902820178302

-- ------------------------------------------------------------ commands

local function connect()
   return sysbench.sql.driver():connect()
end

local function field_names()
   local out = {}
   for i = 0, sysbench.opt.fields - 1 do out[#out + 1] = "FIELD" .. i end
   return out
end

local function value()
   return sysbench.rand.string(string.rep("@", sysbench.opt.field_length))
end

local function row_values(keynum)
   local vals = { "'" .. key_name(keynum) .. "'" }
   for _ = 1, sysbench.opt.fields do vals[#vals + 1] = "'" .. value() .. "'" end
   return "(" .. table.concat(vals, ",") .. ")"
end

function cmd_prepare()
   local con = connect()
   local threads, records, batch = sysbench.opt.threads, sysbench.opt.records, sysbench.opt.load_batch
   local head = "INSERT INTO usertable (YCSB_KEY," .. table.concat(field_names(), ",") .. ") VALUES "
   local t0 = T.now_us()
   local rows, pending = 0, {}
   for k = sysbench.tid, records - 1, threads do
      pending[#pending + 1] = row_values(k)
      if #pending >= batch then
         con:query(head .. table.concat(pending, ","))
         rows = rows + #pending
         pending = {}
      end
   end
   if #pending > 0 then
      con:query(head .. table.concat(pending, ","))
      rows = rows + #pending
   end
   io.stdout:write(string.format("YCSB_LOAD %s\n", T.json({ thread = sysbench.tid, rows = rows,
      seconds = (T.now_us() - t0) / 1e6 })))
   io.stdout:flush()
   con:disconnect()
end

-- `keyname N...`: print YCSB's key names (the self-test compares them with
-- wanbench's Python implementation).
function cmd_keyname()
   for n in string.gmatch(os.getenv("WB_YCSB_KEYNUMS") or "", "%d+") do
      io.stdout:write(string.format("YCSB_KEY %s %s\n", n, key_name(tonumber(n))))
   end
end

sysbench.cmdline.commands = {
   prepare = { cmd_prepare, sysbench.cmdline.PARALLEL_COMMAND },
   keyname = { cmd_keyname },
}

-- ------------------------------------------------------------ per thread

pcall(ffi.cdef, [[
int open(const char *path, int flags, int mode);
int ftruncate(int fd, int64_t length);
void *mmap(void *addr, size_t length, int prot, int flags, int fd, int64_t offset);
int close(int fd);
]])

local con, stats, spec, choose_op
local slots           -- shared int64 per thread: inserts finished (acknowledged or not)
local my_inserts = 0
local acked, unsure, key_counts = {}, {}, {}
local zscr, zlatest
local LOG_BASE = math.log(1.01)
local t_start

local function new_bucket()
   return { count = 0, sum_us = 0, min_us = -1, max_us = 0, hist = {} }
end

local function record(st, us)
   st.count = st.count + 1
   st.sum_us = st.sum_us + us
   if us > st.max_us then st.max_us = us end
   if st.min_us < 0 or us < st.min_us then st.min_us = us end
   local key = tostring(math.floor(math.log(math.max(us, 1)) / LOG_BASE))
   st.hist[key] = (st.hist[key] or 0) + 1
end

local function map_slots()
   local dir = os.getenv("WB_SCRATCH")
   assert(dir, "ycsb.lua needs $WB_SCRATCH (run it through wanbench)")
   local fd = ffi.C.open(dir .. "/acks.bin", 66, 384) -- O_RDWR|O_CREAT, 0600
   assert(fd >= 0, "cannot open the shared insert counters")
   ffi.C.ftruncate(fd, 8 * sysbench.opt.threads)
   local p = ffi.C.mmap(nil, 8 * sysbench.opt.threads, 3, 1, fd, 0) -- PROT_READ|WRITE, MAP_SHARED
   ffi.C.close(fd)
   assert(ffi.cast("intptr_t", p) ~= -1, "cannot map the shared insert counters")
   return ffi.cast("volatile int64_t *", p)
end

-- AcknowledgedCounterGenerator.lastValue() over every thread's finished inserts
local function last_acknowledged()
   local fewest = math.huge
   for t = 0, sysbench.opt.threads - 1 do
      local n = tonumber(slots[t])
      if n < fewest then fewest = n end
   end
   return sysbench.opt.records - 1 + sysbench.opt.threads * fewest
end

local function next_keynum()
   local limit = last_acknowledged()
   local k
   if spec.dist == "latest" then
      k = limit - zipf_next(zlatest, limit) -- SkewedLatestGenerator
   else
      repeat
         local item = zipf_next(zscr, SCRAMBLE_ITEMS)
         k = tonumber(fnv64(item) % ffi.cast("uint64_t", sysbench.opt.key_space))
      until k <= limit
   end
   if sysbench.opt.key_stats then key_counts[k] = (key_counts[k] or 0) + 1 end
   return k
end

function thread_init()
   con = connect()
   spec = WORKLOADS[string.lower(sysbench.opt.workload)]
   assert(spec, "--workload must be one of a, b, c, d, e, f")
   assert(sysbench.opt.key_space > 0, "--key-space must be set (records + expected new keys + 1)")
   stats = {}
   for _, op in ipairs(ORDER) do
      stats[op] = { ok = new_bucket(), err = new_bucket(), codes = {} }
   end
   local cuts, acc = {}, 0
   for _, op in ipairs(ORDER) do
      if spec.mix[op] then
         acc = acc + spec.mix[op]
         cuts[#cuts + 1] = { acc, op }
      end
   end
   choose_op = function()
      local r = uniform01() * acc
      for _, c in ipairs(cuts) do
         if r < c[1] then return c[2] end
      end
      return cuts[#cuts][2]
   end
   slots = map_slots()
   zscr = zipfian(SCRAMBLE_ITEMS, SCRAMBLE_ZETAN)
   if spec.dist == "latest" then
      assert(sysbench.opt.latest_zetan > 0, "--latest-zetan must be set for workload d")
      zlatest = zipfian(sysbench.opt.records - 1, sysbench.opt.latest_zetan)
   end
end

local function do_read(k)
   local rs = con:query(string.format("SELECT * FROM usertable WHERE YCSB_KEY='%s'", key_name(k)))
   if rs and rs.nrows == 0 then stats.READ.not_found = (stats.READ.not_found or 0) + 1 end
end

local function do_update(k)
   local f = sysbench.rand.uniform(0, sysbench.opt.fields - 1)
   con:query(string.format("UPDATE usertable SET FIELD%d='%s' WHERE YCSB_KEY='%s'", f, value(), key_name(k)))
end

local function do_scan(k)
   local len = sysbench.rand.uniform(1, sysbench.opt.max_scan_length)
   con:query(string.format("SELECT * FROM usertable WHERE YCSB_KEY >= '%s' ORDER BY YCSB_KEY LIMIT %d",
      key_name(k), len))
end

-- one measured call: latency into the op's bucket, errors by code
local function measure(op, fn, k)
   local t0 = T.now_us()
   local ok, err = pcall(fn, k)
   local us = T.now_us() - t0
   local st = stats[op]
   if ok then
      record(st.ok, us)
      return true
   end
   if type(err) == "table" and err.sql_errno then
      local code = tostring(err.sql_errno)
      st.codes[code] = (st.codes[code] or 0) + 1
      record(st.err, us)
      if LOST[err.sql_errno] then
         pcall(function() con:reconnect() end)
         return false, true
      end
      return false, false
   end
   error(err, 0)
end

local function do_insert()
   local k = sysbench.opt.records + my_inserts * sysbench.opt.threads + sysbench.tid
   local ok, lost = measure("INSERT", function(key)
      con:query("INSERT INTO usertable (YCSB_KEY," .. table.concat(field_names(), ",") .. ") VALUES " ..
         row_values(key))
   end, k)
   if ok then
      acked[#acked + 1] = k
   elseif lost then
      unsure[#unsure + 1] = k
   end
   my_inserts = my_inserts + 1
   slots[sysbench.tid] = my_inserts -- acknowledged in any case, as YCSB does (finally)
end

function event()
   if not t_start then t_start = T.now_us() end
   local op = choose_op()
   if op == "INSERT" then
      do_insert()
   elseif op == "READ" then
      measure("READ", do_read, next_keynum())
   elseif op == "UPDATE" then
      measure("UPDATE", do_update, next_keynum())
   elseif op == "SCAN" then
      measure("SCAN", do_scan, next_keynum())
   else -- READ_MODIFY_WRITE: its read and update are measured on their own too, as YCSB does
      local k = next_keynum()
      local t0 = T.now_us()
      local ok = measure("READ", do_read, k)
      if ok then ok = measure("UPDATE", do_update, k) end
      local us = T.now_us() - t0
      local st = stats.READ_MODIFY_WRITE
      if ok then record(st.ok, us) else record(st.err, us) end
   end
end

local function write_list(name, list)
   if #list == 0 then return end
   local f = assert(io.open(os.getenv("WB_SCRATCH") .. "/" .. name, "w"))
   f:write(table.concat(list, "\n"), "\n")
   f:close()
end

function thread_done()
   local out = { thread = sysbench.tid, seconds = t_start and (T.now_us() - t_start) / 1e6 or 0,
                 ops = stats, inserts = #acked, unsure = #unsure }
   io.stdout:write("YCSB_STATS " .. T.json(out) .. "\n")
   io.stdout:flush()
   write_list("inserts-" .. sysbench.tid .. ".txt", acked)
   write_list("unsure-" .. sysbench.tid .. ".txt", unsure)
   if sysbench.opt.key_stats then
      local lines = {}
      for k, n in pairs(key_counts) do lines[#lines + 1] = k .. " " .. n end
      write_list("keys-" .. sysbench.tid .. ".txt", lines)
   end
   pcall(function() con:disconnect() end)
end

function sysbench.hooks.report_intermediate(_) end
