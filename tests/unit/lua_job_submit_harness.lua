-- Runs job_submit.lua outside slurmctld, with a fake `slurm` table, over a list of cases.
-- Usage: lua5.1 lua_job_submit_harness.lua DIR/job_submit.lua CASES.lua
-- CASES.lua returns a list of {id=, mode="submit"|"modify", script=, account=, default_account=,
-- qos=, admin_comment=, uid=, environment=, requeue=, het_job_offset=}. `environment` (a table of
-- NAME = value, like job_desc.environment of a batch job) is given only when the case has one;
-- `requeue` and `het_job_offset` default to Slurm's unset values. For each case one line is
-- printed: id <TAB> rc <TAB> qos <TAB> admin_comment <TAB> user message <TAB> environment
-- afterwards (NAME=value lines, sorted), with \ \t \n escaped and nil as \N.

local messages = {}
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1, ESLURM_ACCESS_DENIED = 2002,
  log_user = function(fmt, ...) messages[#messages + 1] = string.format(fmt, ...) end,
  log_info = function() end, log_error = function() end, log_debug = function() end,
  log_verbose = function() end,
}

local function escape(value)
  if value == nil then return "\\N" end
  return (tostring(value):gsub("\\", "\\\\"):gsub("\t", "\\t"):gsub("\n", "\\n"))
end

local script_path, cases_path = arg[1], arg[2]
local rc = dofile(script_path)
assert(rc == slurm.SUCCESS, "job_submit.lua did not return slurm.SUCCESS")
local cases = dofile(cases_path)

for _, case in ipairs(cases) do
  messages = {}
  local job_desc = {
    script = case.script, account = case.account, default_account = case.default_account,
    qos = case.qos, admin_comment = case.admin_comment, comment = case.comment,
    environment = case.environment,
    -- Slurm's unset values: NO_VAL16 and NO_VAL
    requeue = case.requeue or 65534, het_job_offset = case.het_job_offset or 4294967294,
  }
  local result
  if case.mode == "modify" then
    result = slurm_job_modify(job_desc, {}, {}, case.uid)
  else
    result = slurm_job_submit(job_desc, {}, case.uid or 1000)
  end
  local message = (#messages > 0) and table.concat(messages, "\n") or nil
  local env = nil
  if case.environment ~= nil then
    local lines = {}
    for k, v in pairs(case.environment) do lines[#lines + 1] = k .. "=" .. v end
    table.sort(lines)
    env = table.concat(lines, "\n")
  end
  io.write(escape(case.id), "\t", escape(result), "\t", escape(job_desc.qos), "\t",
           escape(job_desc.admin_comment), "\t", escape(message), "\t", escape(env), "\n")
end
