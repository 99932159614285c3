-- wanbench slap-style probe: the seed's mysqlslap runs, measured by sysbench.
--
-- One event = one statement, so `--events=Q --time=0` runs exactly Q queries
-- in total over all threads (mysqlslap's --number-of-queries):
--   --kind=read   point SELECT by a random primary key of wb_probe_read
--                 (ids 1..--rows; the table is prepared by wanbench)
--   --kind=write  single-row INSERT into wb_probe_write in autocommit mode,
--                 so on the lab every commit waits for the semi-sync ack
-- Each thread connects and prepares its statement in thread_init, before
-- sysbench starts its timer: connection setup is never counted as latency.

sysbench.cmdline.options = {
   kind = {"read (point select) or write (single-row insert)", "read"},
   rows = {"rows of wb_probe_read (ids 1..rows)", 10000},
   extra_round_trips = {"calibration handicap: a 'SELECT 1' this many times before each event's statement", 0},
}

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   local kind = sysbench.opt.kind
   local extra = sysbench.opt.extra_round_trips
   if kind == "read" then
      local rows = sysbench.opt.rows
      local uniform = sysbench.rand.uniform
      stmt = con:prepare("SELECT c FROM wb_probe_read WHERE id = ?")
      local id = stmt:bind_create(sysbench.sql.type.INT)
      stmt:bind_param(id)
      -- specialised per thread: no option lookups on the per-event path
      event = function()
         id:set(uniform(1, rows))
         stmt:execute()
      end
   elseif kind == "write" then
      stmt = con:prepare("INSERT INTO wb_probe_write (k, c) VALUES (?, ?)")
      local k = stmt:bind_create(sysbench.sql.type.INT)
      local c = stmt:bind_create(sysbench.sql.type.CHAR, 120)
      c:set(string.rep("w", 120))
      k:set(sysbench.tid)
      stmt:bind_param(k, c)
      event = function()
         stmt:execute()
      end
   else
      error("--kind must be read or write, not " .. tostring(kind))
   end
   if extra > 0 then  -- the census calibration's handicap: more round trips per operation, known exactly
      local measured = event
      event = function()
         for _ = 1, extra do
            con:query("SELECT 1")
         end
         measured()
      end
   end
end

-- Replaced per thread in thread_init; sysbench wants one at load time.
function event()
   error("probe.lua: thread_init did not run")
end

function thread_done()
   stmt:close()
   con:disconnect()
end

local here = sysbench.cmdline.script_path:match("^(.*)/") or "."
dofile(here .. "/wb_hooks.lua")
