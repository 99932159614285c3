-- wanbench report hooks for sysbench 1.0.20.
--
-- Loaded after a workload script (the bundled oltp_*.lua through a generated
-- wrapper, or wanbench's probe.lua). Every report becomes one line
--   WBJSON {...}
-- on stdout, next to sysbench's own human-readable interval lines, so the
-- Python side parses numbers instead of scraping text:
--   type=interval    every --report-interval second (report_intermediate)
--   type=cumulative  at each --report-checkpoints and at the end; the last
--                    one covers only the time after the last checkpoint
--   type=thread      from each worker at thread_done: SQL errors by MySQL
--                    error code (workers have their own Lua states, so the
--                    counts cannot reach the reporter any other way)
-- With $WB_GO set (load hosts), each thread prints WBARMED once connected and
-- waits on that FIFO until the runner releases every host at once.
-- Test-only knobs (defaults do nothing and add no per-event work):
--   --wb-slow-start=S --wb-slow-ms=M  sleep M ms per event during a thread's
--                                     first S seconds (proves warm-up exclusion)
--   --wb-spin=N                       burn N loop iterations of client CPU per
--                                     event (provokes client saturation)

local ffi = require("ffi")
pcall(ffi.cdef, [[
int usleep(unsigned int usec);
typedef struct { long tv_sec; long tv_nsec; } wb_timespec_t;
int clock_gettime(int clk_id, wb_timespec_t *tp);
]])

local CLOCK_MONOTONIC = 1

local function wb_now()
   local ts = ffi.new("wb_timespec_t")
   ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
   return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local function num(x)
   x = tonumber(x)
   if x == nil or x ~= x or x == math.huge or x == -math.huge then
      return "null"
   end
   return string.format("%.9g", x)
end

sysbench.cmdline.options = sysbench.cmdline.options or {}
sysbench.cmdline.options.wb_warmup =
   {"wanbench: seconds at the start whose SQL errors count as warm-up", 0}
sysbench.cmdline.options.wb_slow_start =
   {"wanbench self-test: slow every event during a thread's first N seconds", 0}
sysbench.cmdline.options.wb_slow_ms =
   {"wanbench self-test: milliseconds to sleep per slowed event", 0}
sysbench.cmdline.options.wb_spin =
   {"wanbench self-test: client-side CPU loop iterations per event", 0}

local function stat_fields(stat)
   return string.format(
      '"t":%s,"interval":%s,"threads":%s,"events":%s,"reads":%s,"writes":%s,' ..
      '"other":%s,"errors":%s,"reconnects":%s,"latency_pct_ms":%s,' ..
      '"queue":%s,"concurrency":%s',
      num(stat.time_total), num(stat.time_interval), num(stat.threads_running),
      num(stat.events), num(stat.reads), num(stat.writes), num(stat.other),
      num(stat.errors), num(stat.reconnects), num(stat.latency_pct * 1000),
      num(stat.queue_length), num(stat.concurrency))
end

function sysbench.hooks.report_intermediate(stat)
   -- one write per line: sysbench's own threads print at the same time
   io.write('WBJSON {"type":"interval",' .. stat_fields(stat) .. '}\n')
   io.flush()
   sysbench.report_default(stat)
end

function sysbench.hooks.report_cumulative(stat)
   io.write('WBJSON {"type":"cumulative",' .. stat_fields(stat) ..
            string.format(',"latency_min_ms":%s,"latency_avg_ms":%s,' ..
                             '"latency_max_ms":%s,"latency_sum_ms":%s}\n',
                          num(stat.latency_min * 1000), num(stat.latency_avg * 1000),
                          num(stat.latency_max * 1000), num(stat.latency_sum * 1000)))
   io.flush()
end

-- Per-worker state (each worker thread has its own Lua state).
local wb_t0 = nil
local wb_codes = {}
local wb_warm_codes = {}

local prev_restart = sysbench.hooks.before_restart_event
function sysbench.hooks.before_restart_event(errdesc)
   local code = tostring(errdesc.sql_errno or "unknown")
   local warmup = tonumber(sysbench.opt.wb_warmup) or 0
   if wb_t0 ~= nil and wb_now() - wb_t0 < warmup then
      wb_warm_codes[code] = (wb_warm_codes[code] or 0) + 1
   else
      wb_codes[code] = (wb_codes[code] or 0) + 1
   end
   if prev_restart then
      return prev_restart(errdesc)
   end
end

local function codes_json(t)
   local parts = {}
   for k, v in pairs(t) do
      parts[#parts + 1] = string.format('"%s":%d', k, v)
   end
   return "{" .. table.concat(parts, ",") .. "}"
end

local prev_thread_init = thread_init
function thread_init(...)
   if prev_thread_init then
      prev_thread_init(...)
   end
   local go = os.getenv("WB_GO")
   if go ~= nil and go ~= "" then
      -- On a load host (wanbench/workloads/loadhosts.py): connected, now wait
      -- to be released together with every thread of every host. WB_GO is a
      -- FIFO: opening it blocks until the wrapper opens it on the runner's GO.
      io.write(string.format("WBARMED %d\n", sysbench.tid))
      io.flush()
      local f = assert(io.open(go, "r"))
      f:close()
      if sysbench.tid == 0 then
         -- the release by this host's own clock (CLOCK_REALTIME): hosts whose
         -- clocks agree can tell how far apart they really started
         local ts = ffi.new("wb_timespec_t")
         ffi.C.clock_gettime(0, ts)
         io.write(string.format("WBGO %d.%09d\n", tonumber(ts.tv_sec), tonumber(ts.tv_nsec)))
         io.flush()
      end
   end
   local slow_start = tonumber(sysbench.opt.wb_slow_start) or 0
   local slow_us = math.floor((tonumber(sysbench.opt.wb_slow_ms) or 0) * 1000)
   local spin = math.floor(tonumber(sysbench.opt.wb_spin) or 0)
   local warmup = tonumber(sysbench.opt.wb_warmup) or 0
   local inner = event
   if slow_start > 0 and slow_us > 0 then
      local ev = inner
      inner = function(...)
         if wb_now() - wb_t0 < slow_start then
            ffi.C.usleep(slow_us)
         end
         return ev(...)
      end
   end
   if spin > 0 then
      local ev = inner
      inner = function(...)
         local x = 0
         for i = 1, spin do
            x = (x + i * 7) % 1000003
         end
         wb_spin_sink = x
         return ev(...)
      end
   end
   if warmup > 0 or inner ~= event then
      -- outermost: a thread's clock starts with its first event
      local ev = inner
      inner = function(...)
         if wb_t0 == nil then wb_t0 = wb_now() end
         return ev(...)
      end
   end
   event = inner
end

local prev_thread_done = thread_done
function thread_done(...)
   if next(wb_codes) ~= nil or next(wb_warm_codes) ~= nil then
      io.write(string.format('WBJSON {"type":"thread","tid":%d,"errors":%s,"warmup_errors":%s}\n',
                             sysbench.tid, codes_json(wb_codes), codes_json(wb_warm_codes)))
   end
   if prev_thread_done then
      return prev_thread_done(...)
   end
end
