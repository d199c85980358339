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
  --chart               add a bar chart of the delays
  -h, --help            this text

OUTCOME is 0 (failure) or 1 (success), optionally @TIME (seconds; default:
the previous time, starting at 0), e.g. 0 0 0@5.5 1.

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

-- returns strategy, options, outcomes, chart; or nil, message
local function parse(argv)
  local strategy, opts, outcomes, chart = nil, {}, {}, false
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then return nil, "help" end
    if a == "-a" or a == "--strategy" or a == "--algorithm" then
      strategy = argv[i + 1]
      if not strategy then return nil, a .. " needs a strategy name" end
      strategy = strategy:lower()
      i = i + 2
    elseif a == "--chart" then
      chart, i = true, i + 1
    elseif FLAGS[a:gsub("^%-%-no%-", ""):gsub("^%-%-", ""):gsub("%-", "_")]
    then
      local name = a:gsub("^%-%-no%-", ""):gsub("^%-%-", ""):gsub("%-", "_")
      opts[name], i = a:find("^%-%-no%-") == nil, i + 1
    elseif a == "--random" then
      local f, err = draws_of(argv[i + 1] or "")
      if not f then return nil, err end
      opts.random, i = f, i + 2
    elseif a:match("^%-%-") then
      local name, value = a:match("^%-%-([%w%-]+)=(.*)$")
      if name then
        i = i + 1
      else
        name, value = a:sub(3), argv[i + 1]
        if value == nil then return nil, a .. " needs a value" end
        i = i + 2
      end
      name = name:gsub("%-", "_")
      opts[name] = tonumber(value) or value
    else
      local kind, at = a:match("^([01])@(.+)$")
      kind = kind or a:match("^([01])$")
      if not kind then return nil, "bad outcome '" .. a .. "' (0 or 1)" end
      if at and not tonumber(at) then
        return nil, "bad time in '" .. a .. "'"
      end
      outcomes[#outcomes + 1] = { kind == "1", tonumber(at) }
      i = i + 1
    end
  end
  if not strategy then return nil, "no strategy: use -a NAME" end
  if opts.start == nil then opts.start = 0 end
  return strategy, opts, outcomes, chart
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

--- Run the tool: argv is a list of strings, write(s) prints results,
-- warn(s) prints notes (default: write).  Returns the exit status.
function cli.run(argv, write, warn)
  warn = warn or write
  local strategy, opts, outcomes, chart = parse(argv)
  if not strategy then
    if opts == "help" then write(cli.usage) return 0 end
    write("backoff-delays: " .. opts .. "\n" .. cli.usage)
    return 2
  end
  local ok, b = pcall(backoff.new, strategy, opts)
  local other = not ok and sibling_for(strategy, opts)
  if other then
    warn(("backoff-delays: note: %s does not take these options; "
          .. "using %s\n"):format(strategy, other))
    ok, b = pcall(backoff.new, other, opts)
  end
  if not ok then
    write("backoff-delays: " .. tostring(b) .. "\n")
    return 2
  end
  local rows, ts, top = {}, opts.start, 0
  for _, o in ipairs(outcomes) do
    ts = o[2] or ts
    local done, d, t
    if o[1] then done, d, t = pcall(b.success, b, ts)
    else done, d, t = pcall(b.failure, b, ts) end
    if not done then                -- a --random draw out of [0, 1]
      write("backoff-delays: " .. tostring(d) .. "\n")
      return 2
    end
    rows[#rows + 1] = { d, t }
    if d and d > top then top = d end
  end
  for _, r in ipairs(rows) do
    local line
    if r[1] == nil then
      line = "give up (" .. r[2] .. ")"
    else
      line = fmt(r[1])
      if r[2] then line = line .. "\t" .. fmt(r[2]) end
      if chart then
        local width = top > 0 and math.floor(r[1] / top * 50 + 0.5) or 0
        line = ("%-12s %s"):format(line, ("#"):rep(width))
      end
    end
    write(line .. "\n")
  end
  return 0
end

return cli
