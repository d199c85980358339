-- bench/bench.lua in several fresh LuaJIT processes: what LuaJIT
-- compiles is drawn anew in each process (CONTRIBUTING.md, "The JIT and
-- the doors"), so one process proves little.  Prints each process's
-- ratios, their median and worst, and in how many processes the retry
-- row's loop ran as one loop trace (read by bench.lua from the bytecode
-- and the traces, not from a time).
--   luajit bench/jit_check.lua [--processes K] [--calls N] [--table]
--                              [--require-all] [--lua CMD]
-- --table: first the full output of the median process (by retry/hand);
-- --require-all: exit 1 unless the loop was a loop trace in all K;
-- --layouts: each process first allocates a string of a random length
-- (LUA_INIT), which moves all the code loaded after it: more layouts of
-- the hot counters drawn than a process's own randomness gives.
-- Run from the checkout with LUA_PATH and LUA_CPATH set, as make does.
local opts = { processes = 30, calls = 2000000, lua = "luajit" }
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--table" or a == "--require-all" or a == "--layouts" then
    opts[a:sub(3)] = true
  elseif a == "--processes" or a == "--calls" or a == "--lua" then
    opts[a:sub(3)] = assert(arg[i + 1], a .. " needs a value")
    i = i + 1
  else
    error("jit_check.lua: unknown argument " .. a)
  end
  i = i + 1
end
local K, N = assert(tonumber(opts.processes)), assert(tonumber(opts.calls))
local cmd = ("BENCH_MACHINE=1 %s bench/bench.lua %d 2>&1"):format(opts.lua, N)

local KEYS = { "retry/pcall", "retry/hand", "clone/table8", "ctor/table8" }
local runs = {}
math.randomseed(os.time())
for p = 1, K do
  local pad = opts.layouts and math.random(0, 4095) or nil
  local init = pad and ("LUA_INIT='_BENCH_PAD = (\"x\"):rep(%d)' ")
    :format(pad) or ""
  local h = assert(io.popen(init .. cmd))
  local out = h:read("*a")
  h:close()
  local line = out:match("\nmachine: ([^\n]*)")
  if not line then
    io.stderr:write(out)
    error("jit_check.lua: process " .. p .. " printed no machine line")
  end
  local run = { out = out:gsub("machine: [^\n]*\n", ""), loop = false }
  for k, v in line:gmatch("(%S+)=(%S+)") do
    if k == "retry_loop" then run.loop = v == "loop"
    else run[k] = tonumber(v) end
  end
  run.state = out:match("the retry row's loop ran as ([^\n]*)") or "?"
  run.pad = pad
  runs[p] = run
end

local function sorted(key)
  local list = {}
  for p = 1, K do list[p] = runs[p] end
  table.sort(list, function(a, b) return a[key] < b[key] end)
  return list
end

if opts.table then
  local median = sorted("retry/hand")[math.floor((K + 1) / 2)]
  io.write(median.out, "\n")
end

print(("LuaJIT in %d fresh processes (%s bench/bench.lua %d):"):format(K,
  opts.lua, N))
print(("%-8s %12s %12s %12s %12s  %s"):format("process", KEYS[1], KEYS[2],
  KEYS[3], KEYS[4], "retry row's loop"))
local compiled = 0
for p, r in ipairs(runs) do
  if r.loop then compiled = compiled + 1 end
  print(("%-8d %12.2f %12.2f %12.2f %12.2f  %s%s"):format(p, r[KEYS[1]],
    r[KEYS[2]], r[KEYS[3]], r[KEYS[4]], r.state,
    r.pad and (" (pad " .. r.pad .. ")") or ""))
end
print()
print(("%-14s %8s %8s %8s"):format("ratio", "best", "median", "worst"))
for _, k in ipairs(KEYS) do
  local list = sorted(k)
  local mid = (K % 2 == 1) and list[(K + 1) / 2][k]
    or (list[K / 2][k] + list[K / 2 + 1][k]) / 2
  print(("%-14s %8.2f %8.2f %8.2f"):format(k, list[1][k], mid, list[K][k]))
end
print(("the retry row's loop ran as one loop trace in %d of %d processes")
  :format(compiled, K))
if opts["require-all"] and compiled < K then os.exit(1) end
