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
   extra_bytes = {"calibration handicap: a parameter of this many bytes more with each statement, ignored by it", 0},
   extra_reads = {"calibration handicap: this many point selects of wb_probe_read before each event's statement", 0},
}

function thread_init()
   drv = sysbench.sql.driver()
   con = drv:connect()
   local kind = sysbench.opt.kind
   local extra = sysbench.opt.extra_round_trips
   local pad_bytes = sysbench.opt.extra_bytes
   if kind == "read" then
      local rows = sysbench.opt.rows
      local uniform = sysbench.rand.uniform
      local id
      if pad_bytes > 0 then  -- the same row, the same plan: only the bytes on the wire grow
         stmt = con:prepare("SELECT c FROM wb_probe_read WHERE id = ? AND ? IS NOT NULL")
         id = stmt:bind_create(sysbench.sql.type.INT)
         local pad = stmt:bind_create(sysbench.sql.type.CHAR, pad_bytes)
         pad:set(string.rep("p", pad_bytes))
         stmt:bind_param(id, pad)
      else
         stmt = con:prepare("SELECT c FROM wb_probe_read WHERE id = ?")
         id = stmt:bind_create(sysbench.sql.type.INT)
         stmt:bind_param(id)
      end
      -- specialised per thread: no option lookups on the per-event path
      event = function()
         id:set(uniform(1, rows))
         stmt:execute()
      end
   elseif kind == "write" then
      local k, c
      if pad_bytes > 0 then  -- the same row written: only the bytes on the wire grow
         stmt = con:prepare("INSERT INTO wb_probe_write (k, c) VALUES (?, LEFT(CONCAT(?, ?), 120))")
         k = stmt:bind_create(sysbench.sql.type.INT)
         c = stmt:bind_create(sysbench.sql.type.CHAR, 120)
         local pad = stmt:bind_create(sysbench.sql.type.CHAR, pad_bytes)
         pad:set(string.rep("p", pad_bytes))
         stmt:bind_param(k, c, pad)
      else
         stmt = con:prepare("INSERT INTO wb_probe_write (k, c) VALUES (?, ?)")
         k = stmt:bind_create(sysbench.sql.type.INT)
         c = stmt:bind_create(sysbench.sql.type.CHAR, 120)
         stmt:bind_param(k, c)
      end
      c:set(string.rep("w", 120))
      k:set(sysbench.tid)
      event = function()
         stmt:execute()
      end
   else
      error("--kind must be read or write, not " .. tostring(kind))
   end
   local reads = sysbench.opt.extra_reads
   if reads > 0 then  -- the census calibration's handicap: a KV read (and a statement) more per operation
      local measured = event
      local rows = sysbench.opt.rows
      local uniform = sysbench.rand.uniform
      local read = con:prepare("SELECT c FROM wb_probe_read WHERE id = ?")
      local rid = read:bind_create(sysbench.sql.type.INT)
      read:bind_param(rid)
      event = function()
         for _ = 1, reads do
            rid:set(uniform(1, rows))
            read:execute()
         end
         measured()
      end
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
