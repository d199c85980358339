-- backoff-delays: print the delays a backoff strategy gives for a
-- sequence of outcomes, in the spirit of Perl's show-backoff-delays.
local backoff = require "backoff"

local cli = {}

cli.usage = [[
usage: backoff-delays -a STRATEGY [--OPTION VALUE ...] [--random LIST]
                      [--chart] OUTCOME...

Prints one line per outcome: the delay (and the timeout when per-attempt
timeouts are on), or "give up (REASON)".

  -a, --strategy NAME   constant, linear, exponential, fibonacci, lild,
                        limd, mild, mimd, decorrelated, retry_timeouts,
                        or a system: google, cenkalti, eventsauce, polly,
                        decorrelated_v2, aws (any case: LILD works)
  --OPTION VALUE        any option of the strategy, dashes for
                        underscores: --initial-delay 2 --max-delay 60
                        --jitter full --seed 42 --backoff-type fibonacci
  --FLAG / --no-FLAG    a boolean option: --consider-actual-delay,
                        --cap-then-jitter, --fast-first, --use-jitter
  --random LIST         the uniform draws to use, in order, instead of
                        the generator: comma-separated numbers in [0, 1]
                        (after the last, the list starts again)
  --chart               add a bar chart of the delays, under a line
                        giving its unit (seconds) and scale (the
                        largest delay is 50 #)
  -h, --help            this text

OUTCOME is 0 (failure) or 1 (success), optionally @TIME (seconds; default:
the previous time, starting at 0), e.g. 0 0 0@5.5 1. At least one.
Delays and timeouts are printed in seconds.

examples: backoff-delays -a LIMD --initial-delay 2 --min-delay 1 \
            --delay-increment-on-failure 4 --delay-multiple-on-success 0.2 \
            0 0 0  1 1 1  0 0 0
          backoff-delays -a google --random 0.5 0 0 0 0 0
]]

-- the options given as a bare --flag (and --no-flag)
local FLAGS = { consider_actual_delay = true, cap_then_jitter = true,
                fast_first = true, use_jitter = true }

-- "0,0.5,1" -> a function returning 0, 0.5, 1, 0, ...; or nil, message
local function draws_of(list)
  local values = {}
  for item in (list .. ","):gmatch("([^,]*),") do
    local v = tonumber(item)
    if not v then return nil, "--random: not a number: '" .. item .. "'" end
    values[#values + 1] = v
  end
  local i = 0
  return function()
    i = i % #values + 1
    return values[i]
  end
end

local function fmt(x)
  return ("%.10g"):format(x)
end

-- "0", "1", "0@5.5" -> { success, time or nil }; or nil, message
local function outcome_of(a)
  local kind, at = a:match("^([01])@(.+)$")
  kind = kind or a:match("^([01])$")
  if not kind then return nil, "bad outcome '" .. a .. "' (0 or 1)" end
  if at and not tonumber(at) then return nil, "bad time in '" .. a .. "'" end
  return { kind == "1", tonumber(at) }
end

-- one option argument at argv[i] into the parse state p; returns the
-- index of the next argument, or nil, message
local function take_option(argv, i, p)
  local a = argv[i]
  local flag = a:gsub("^%-%-no%-", ""):gsub("^%-%-", ""):gsub("%-", "_")
  if a == "-a" or a == "--strategy" or a == "--algorithm" then
    if not argv[i + 1] then return nil, a .. " needs a strategy name" end
    p.strategy = argv[i + 1]:lower()
    return i + 2
  elseif a == "--chart" then
    p.chart = true
    return i + 1
  elseif FLAGS[flag] then
    p.opts[flag] = a:find("^%-%-no%-") == nil
    return i + 1
  elseif a == "--random" then
    local f, err = draws_of(argv[i + 1] or "")
    if not f then return nil, err end
    p.opts.random = f
    return i + 2
  end
  local name, value = a:match("^%-%-([%w%-]+)=(.*)$")
  local next_i = i + 1
  if not name then
    name, value, next_i = a:sub(3), argv[i + 1], i + 2
    if value == nil then return nil, a .. " needs a value" end
  end
  p.opts[name:gsub("%-", "_")] = tonumber(value) or value
  return next_i
end

-- returns strategy, options, outcomes, chart; or nil, message ("help"
-- for -h)
local function parse(argv)
  local p = { opts = {}, outcomes = {}, chart = false }
  local i = 1
  while i <= #argv do
    local a, err = argv[i]
    if a == "-h" or a == "--help" then return nil, "help" end
    if a == "-a" or a:match("^%-%-") then
      i, err = take_option(argv, i, p)
    else
      local o
      o, err = outcome_of(a)
      p.outcomes[#p.outcomes + 1] = o
      i = i + 1
    end
    if err then return nil, err end
  end
  if not p.strategy then return nil, "no strategy: use -a NAME" end
  if #p.outcomes == 0 then
    return nil, "no outcome to print: give 0 (a failure) or 1 (a success) "
      .. "for each attempt"
  end
  if p.opts.start == nil then p.opts.start = 0 end
  return p.strategy, p.opts, p.outcomes, p.chart
end

-- The *I*D strategies differ only in their option names, and a mix-up
-- is easy (Perl's own LIMD docs say -a LILD): when the named one refuses
-- the options and exactly one sibling takes them, use it, and say so.
local SIBLINGS = { lild = true, limd = true, mild = true, mimd = true }

local function sibling_for(strategy, opts)
  if not SIBLINGS[strategy] then return nil end
  local found
  for other in pairs(SIBLINGS) do
    if other ~= strategy and pcall(backoff.new, other, opts) then
      if found then return nil end
      found = other
    end
  end
  return found
end

-- the chart's first line: its unit and its scale (the largest delay,
-- top, is 50 #)
local function chart_header(top, timeouts)
  local unit = timeouts and "delay\ttimeout (s)" or "delay (s)"
  local scale = top > 0
    and ("one # = %s s (the largest, %s s, is 50 #)"):format(
      ("%.3g"):format(top / 50), fmt(top))
    or "every delay is 0 s"
  return ("%-12s %s"):format(unit, scale)
end

-- the object for strategy and opts (or for the sibling that takes
-- them, with a note); or nil, message
local function object_of(strategy, opts, warn)
  local ok, b = pcall(backoff.new, strategy, opts)
  local other = not ok and sibling_for(strategy, opts)
  if other then
    warn(("backoff-delays: note: %s does not take these options; "
          .. "using %s\n"):format(strategy, other))
    ok, b = pcall(backoff.new, other, opts)
  end
  if not ok then return nil, tostring(b) end
  return b
end

-- the { delay, timeout or reason } of each outcome, the largest delay,
-- and whether timeouts were printed; or nil, message
local function rows_of(b, opts, outcomes)
  local rows, ts, top, timeouts = {}, opts.start, 0, false
  for _, o in ipairs(outcomes) do
    ts = o[2] or ts
    local done, d, t = pcall(o[1] and b.success or b.failure, b, ts)
    if not done then return nil, tostring(d) end  -- a bad --random draw
    rows[#rows + 1] = { d, t }
    if d and d > top then top = d end
    timeouts = timeouts or t ~= nil and d ~= nil
  end
  return rows, top, timeouts
end

-- one row as printed: the delay (and timeout), with its bar on a chart
local function line_of(r, chart, top)
  if r[1] == nil then return "give up (" .. r[2] .. ")" end
  local line = fmt(r[1])
  if r[2] then line = line .. "\t" .. fmt(r[2]) end
  if not chart then return line end
  local width = top > 0 and math.floor(r[1] / top * 50 + 0.5) or 0
  return (("%-12s %s"):format(line, ("#"):rep(width)):gsub("%s+$", ""))
end

--- Run the tool: argv is a list of strings, write(s) prints results
-- (stdout), warn(s) prints errors and notes (stderr; default: write).
-- Returns the exit status: 0, or 2 for a usage error or a bad option.
function cli.run(argv, write, warn)
  warn = warn or write
  local strategy, opts, outcomes, chart = parse(argv)
  if not strategy then
    if opts == "help" then write(cli.usage) return 0 end
    warn("backoff-delays: " .. opts .. "\n" .. cli.usage)
    return 2
  end
  local b, err = object_of(strategy, opts, warn)
  local rows, top, timeouts
  if b then rows, top, timeouts = rows_of(b, opts, outcomes) end
  if not rows then
    warn("backoff-delays: " .. (err or top) .. "\n")
    return 2
  end
  if chart then write(chart_header(top, timeouts) .. "\n") end
  for _, r in ipairs(rows) do write(line_of(r, chart, top) .. "\n") end
  return 0
end

return cli
