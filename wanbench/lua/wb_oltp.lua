-- wanbench wrapper around a bundled sysbench workload script.
--
-- Runs the script named by $WB_SYSBENCH_SCRIPT (e.g.
-- /usr/share/sysbench/oltp_read_write.lua) unchanged, then adds wanbench's
-- report hooks (wb_hooks.lua: JSON report lines, errors by code). By hand:
--   WB_SYSBENCH_SCRIPT=/usr/share/sysbench/oltp_read_write.lua \
--     sysbench wanbench/lua/wb_oltp.lua --mysql-... --histogram run

local script = os.getenv("WB_SYSBENCH_SCRIPT")
if script == nil or script == "" then
   error("wanbench: set WB_SYSBENCH_SCRIPT to a bundled sysbench script, " ..
         "e.g. /usr/share/sysbench/oltp_read_write.lua")
end
local dir = script:match("^(.*)/")
if dir then
   package.path = dir .. "/?.lua;" .. package.path
end
dofile(script)

local here = sysbench.cmdline.script_path:match("^(.*)/") or "."
dofile(here .. "/wb_hooks.lua")
