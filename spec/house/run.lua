-- The house test: the rules of CONTRIBUTING.md's map, checked on the
-- tree rather than stated.  TAP.
--   HOUSE_CC='cc <the module's flags> -Icsrc' lua5.4 spec/house/run.lua ROOT
-- (`make house` passes the module build's compiler and flags.)
--
--   1. no call circle in csrc/: each .c compiled to its own object file,
--      its defined and undefined symbols read with nm; a file that uses
--      a symbol another defines draws an edge to it;
--   2. no #include circle among csrc/*.c and *.h;
--   3. no require circle among lua/**/*.lua (a require inside a function
--      counts; comments do not);
--   4. no file over 500 lines in csrc/ or lua/;
--   5. no Lua function above cyclomatic complexity 15 (luacheck's W561);
--   6. the floors: every Lua module has a floor in the ```floors block of
--      CONTRIBUTING.md (the layers, declared once: the map people read is
--      the table this test reads), and requires no module on a floor
--      above its own.
--
-- Every check first runs on the fixture trees of spec/house/fixtures/
-- (and on two trees written here: 500 and 501 lines), where it must
-- catch the fault the fixture holds and pass the clean one; then the
-- same function checks ROOT.
local ROOT = assert(arg[1], "usage: run.lua ROOT")
local CC = assert(os.getenv("HOUSE_CC"), "HOUSE_CC: the module's compile "
  .. "command without sources (make house sets it)")
local OUT = os.getenv("HOUSE_OUT") or "build/house"
if OUT:sub(1, 1) ~= "/" then OUT = ROOT .. "/" .. OUT end
local FIXTURES = ROOT .. "/spec/house/fixtures"
local MAX_LINES, MAX_COMPLEXITY = 500, 15

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- the lines a command prints; nil, message when it fails
local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  local ok, _, status = p:close()
  if not ok then
    return nil, ("`%s` failed (%s):\n%s"):format(cmd, tostring(status),
      table.concat(lines, "\n"))
  end
  return lines
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- the files under dir (relative to it) whose names match pattern, sorted
local function files(dir, pattern)
  local list = {}
  local p = assert(io.popen("cd " .. q(dir) .. " 2>/dev/null && find . "
    .. "-type f | sort"))
  for path in p:lines() do
    path = path:gsub("^%./", "")
    if path:match(pattern) then list[#list + 1] = path end
  end
  p:close()
  return list
end

------------------------------------------------------------------------
-- circles in a graph: nodes -> { [to] = why }

-- One circle through every strongly connected component of more than
-- one node (or a node with an edge to itself), as "a -> b -> a (why)".
local function circles(graph)
  local names = {}
  for name in pairs(graph) do names[#names + 1] = name end
  table.sort(names)
  local function targets(v)
    local list = {}
    for w in pairs(graph[v] or {}) do list[#list + 1] = w end
    table.sort(list)
    return list
  end
  -- Tarjan's components
  local index, low, on, stack, n, comps = {}, {}, {}, {}, 0, {}
  local function connect(v)
    n = n + 1
    index[v], low[v] = n, n
    stack[#stack + 1], on[v] = v, true
    for _, w in ipairs(targets(v)) do
      if not index[w] then
        connect(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local comp = {}
      repeat
        local w = table.remove(stack)
        on[w] = nil
        comp[w] = true
      until w == v
      comps[#comps + 1] = { first = v, members = comp }
    end
  end
  for _, v in ipairs(names) do
    if not index[v] then connect(v) end
  end
  local found = {}
  for _, c in ipairs(comps) do
    local size = 0
    for _ in pairs(c.members) do size = size + 1 end
    local start = c.first
    for m in pairs(c.members) do if m < start then start = m end end
    if size > 1 or (graph[start] or {})[start] then
      -- a shortest way back to start inside the component (BFS)
      local prev, queue, head = { [start] = false }, { start }, 1
      local back
      while head <= #queue and not back do
        local v = queue[head]
        head = head + 1
        for _, w in ipairs(targets(v)) do
          if w == start then back = v break end
          if c.members[w] and prev[w] == nil then
            prev[w] = v
            queue[#queue + 1] = w
          end
        end
      end
      local path = { start }
      local v = back
      while v and v ~= start do
        table.insert(path, 2, v)
        v = prev[v]
      end
      path[#path + 1] = start
      local why = {}
      for i = 1, #path - 1 do
        why[#why + 1] = graph[path[i]][path[i + 1]]
      end
      found[#found + 1] = table.concat(path, " -> ") .. " ("
        .. table.concat(why, "; ") .. ")"
    end
  end
  table.sort(found)
  return found
end

------------------------------------------------------------------------
-- the checks: check(tree) -> problems (a list of strings), count of the
-- files it looked at; raises when it cannot look

local check = {}

-- 1. calls between the object files of csrc/*.c
function check.c_calls(tree, objdir)
  local sources = files(tree .. "/csrc", "^[^/]+%.c$")
  assert(os.execute("mkdir -p " .. q(objdir)))
  local defines, uses = {}, {}
  for _, c in ipairs(sources) do
    local obj = objdir .. "/" .. c:gsub("%.c$", ".o")
    assert(run("cd " .. q(tree) .. " && " .. CC .. " -c csrc/" .. c
      .. " -o " .. q(obj)))
    local syms = assert(run("nm -P " .. q(obj)))
    local file = "csrc/" .. c
    uses[file] = {}
    for _, line in ipairs(syms) do
      local name, kind = line:match("^(%S+) (%a) ")
      if kind == "U" then
        uses[file][name] = true
      elseif kind and kind:match("%u") then   -- global: T, D, B, R, W...
        defines[name] = file
      end
    end
  end
  local graph = {}
  for file, used in pairs(uses) do
    graph[file] = {}
    local by = {}
    for name in pairs(used) do
      local owner = defines[name]
      if owner and owner ~= file then
        by[owner] = by[owner] or {}
        table.insert(by[owner], name)
      end
    end
    for owner, names in pairs(by) do
      table.sort(names)
      if #names > 3 then
        names = { names[1], names[2], names[3], "..." }
      end
      graph[file][owner] = file:match("[^/]+$") .. " uses "
        .. table.concat(names, ", ")
    end
  end
  return circles(graph), #sources
end

-- 2. #include "..." among csrc/*.c and *.h
function check.c_includes(tree)
  local list = files(tree .. "/csrc", "^[^/]+%.[ch]$")
  local graph = {}
  for _, f in ipairs(list) do
    local file = "csrc/" .. f
    graph[file] = {}
    for name in read(tree .. "/" .. file):gmatch('#%s*include%s*"([^"]+)"')
    do
      graph[file]["csrc/" .. name] = file:match("[^/]+$") .. " includes "
        .. name
    end
  end
  return circles(graph), #list
end

-- Lua source with comments removed (strings kept, so that a require's
-- argument survives; a require inside a string is not one either)
local function strip_comments(src)
  local out, i, n = {}, 1, #src
  while i <= n do
    local c = src:sub(i, i)
    if src:sub(i, i + 1) == "--" then
      local eq = src:match("^%[(=*)%[", i + 2)
      if eq then
        local _, e = src:find("]" .. eq .. "]", i, true)
        i = (e or n) + 1
      else
        i = (src:find("\n", i, true) or n + 1)
      end
    elseif c == "'" or c == '"' then
      local j = i + 1
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then j = j + 1 elseif d == c or d == "\n" then break end
        j = j + 1
      end
      out[#out + 1] = src:sub(i, j)
      i = j + 1
    elseif c == "[" and src:match("^%[=*%[", i) then
      local eq = src:match("^%[(=*)%[", i)
      local _, e = src:find("]" .. eq .. "]", i, true)
      out[#out + 1] = src:sub(i, e or n)
      i = (e or n) + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out)
end

-- the modules a Lua source requires: require "m", require("m"),
-- require 'm', require [[m]], pcall(require, "m")
local function requires(src)
  local code = strip_comments(src)
  local found = {}
  local forms = {
    "%f[%w_]require%s*%(?%s*[\"']([^\"'\n]+)[\"']",
    "%f[%w_]require%s*%(?%s*%[=*%[([^%]\n]+)%]",
    "%f[%w_]pcall%s*%(%s*require%s*,%s*[\"']([^\"'\n]+)[\"']",
  }
  for _, form in ipairs(forms) do
    for name in code:gmatch(form) do found[name] = true end
  end
  return found
end

-- the Lua modules of a tree: { module name -> "lua/path" }, and how
-- many; a module m is lua/m.lua or lua/m/init.lua (dots as slashes)
local function modules(tree)
  local list = files(tree .. "/lua", "%.lua$")
  local file_of = {}
  for _, f in ipairs(list) do
    local name = f:gsub("/init%.lua$", ""):gsub("%.lua$", ""):gsub("/", ".")
    file_of[name] = "lua/" .. f
  end
  return file_of, #list
end

-- 3. require among lua/**/*.lua; modules not in the tree are ignored
function check.lua_requires(tree)
  local file_of, n = modules(tree)
  local graph = {}
  for name, file in pairs(file_of) do
    graph[name] = {}
    for m in pairs(requires(read(tree .. "/" .. file))) do
      if file_of[m] then
        graph[name][m] = file:match("lua/(.*)") .. " requires " .. m
      end
    end
  end
  return circles(graph), n
end

-- the floors declared in tree/CONTRIBUTING.md: a ```floors block of
-- lines "N  name[,name...]  what they are", a name being a module or
-- "prefix.*" (every module under prefix); lines that start with a space
-- go on describing the line before.  -> { name -> N }, { prefix -> N }
local function floors_of(tree)
  local text = read(tree .. "/CONTRIBUTING.md")
  local block = text:match("\n```floors\n(.-)\n```")
  assert(block, tree .. "/CONTRIBUTING.md has no ```floors block")
  local exact, prefix = {}, {}
  for line in block:gmatch("[^\n]+") do
    local n, names = line:match("^(%d+)%s+(%S+)")
    if n then
      for name in names:gmatch("[^,]+") do
        local p = name:match("^(.*)%.%*$")
        if p then prefix[p] = tonumber(n) else exact[name] = tonumber(n) end
      end
    end
  end
  return exact, prefix
end

-- a module's floor: its own line, else the longest "prefix.*" over it
local function floor_of(m, exact, prefix)
  if exact[m] then return exact[m] end
  local best, at
  for p, n in pairs(prefix) do
    if m:sub(1, #p + 1) == p .. "." and (not best or #p > #best) then
      best, at = p, n
    end
  end
  return at
end

-- 6. no require reaches up a floor, and every module has one
function check.lua_floors(tree)
  local exact, prefix = floors_of(tree)
  local file_of, n = modules(tree)
  local problems = {}
  for name, file in pairs(file_of) do
    local mine = floor_of(name, exact, prefix)
    if not mine then
      problems[#problems + 1] = file .. ": module " .. name
        .. " has no floor in CONTRIBUTING.md"
    else
      for m in pairs(requires(read(tree .. "/" .. file))) do
        local theirs = file_of[m] and floor_of(m, exact, prefix)
        if theirs and theirs > mine then
          problems[#problems + 1] = ("%s: %s (floor %d) requires %s "
            .. "(floor %d), a floor above it"):format(file, name, mine, m,
            theirs)
        end
      end
    end
  end
  table.sort(problems)
  return problems, n
end

local function count_lines(s)
  local _, n = s:gsub("\n", "")
  if #s > 0 and s:sub(-1) ~= "\n" then n = n + 1 end
  return n
end

-- 4. lines per file in csrc/ and lua/
function check.long_files(tree)
  local problems, n = {}, 0
  for _, dir in ipairs({ "csrc", "lua" }) do
    for _, f in ipairs(files(tree .. "/" .. dir, ".")) do
      n = n + 1
      local lines = count_lines(read(tree .. "/" .. dir .. "/" .. f))
      if lines > MAX_LINES then
        problems[#problems + 1] = ("%s/%s: %d lines (> %d)"):format(dir, f,
          lines, MAX_LINES)
      end
    end
  end
  return problems, n
end

-- 5. luacheck's cyclomatic complexity over lua/
function check.complexity(tree)
  local list = files(tree .. "/lua", "%.lua$")
  if #list == 0 then return {}, 0 end
  local cmd = "cd " .. q(tree) .. " && luacheck --no-config --only 561 "
    .. "--max-cyclomatic-complexity " .. MAX_COMPLEXITY
    .. " --formatter plain --codes lua/"
  local p = assert(io.popen(cmd .. " 2>&1"))
  local problems, other = {}, {}
  for line in p:lines() do
    -- "of function 'f'", "of method 'M.f'", "of function" (anonymous),
    -- "of main chunk"
    local where, what, value = line:match(
      "^(.-:%d+):%d+: %(W561%) cyclomatic complexity of (.-) is too high "
      .. "%((%d+) >")
    if where then
      local name = what:match("'(.*)'") or "(" .. what .. ")"
      problems[#problems + 1] = ("%s %s %s"):format(where, name, value)
    else
      other[#other + 1] = line
    end
  end
  local _, _, status = p:close()
  -- luacheck exits 1 for warnings only; 2 and up for errors
  if status > 1 or #other > 0 then
    error(("`%s` exited with %d:\n%s"):format(cmd, status,
      table.concat(other, "\n")))
  end
  return problems, #list
end

------------------------------------------------------------------------
-- TAP

local n, failed = 0, 0
local function tap(ok, what, detail)
  n = n + 1
  if not ok then failed = failed + 1 end
  print((ok and "ok " or "not ok ") .. n .. " - " .. what)
  if detail and detail ~= "" then
    for line in tostring(detail):gmatch("[^\n]+") do print("# " .. line) end
  end
end

-- run a check, turning a raise into one failed test
local function try(name, tree)
  local ok, problems, count = pcall(check[name], tree, OUT .. "/obj/"
    .. tree:gsub("[^%w]+", "_"))
  if not ok then return nil, problems end
  return problems, count
end

-- the fixture must make the check report exactly one problem, matching
-- pattern (plain text)
local function catches(name, tree, want, what)
  local problems, err = try(name, FIXTURES .. "/" .. tree)
  if not problems then return tap(false, what, err) end
  local hit = #problems == 1 and problems[1]:find(want, 1, true)
  tap(hit, what, hit and ("caught: " .. problems[1])
    or ("expected one problem naming " .. want .. ", got:\n"
        .. table.concat(problems, "\n")))
end

-- the clean fixture passes every check (each check can pass)
for _, name in ipairs({ "c_calls", "c_includes", "lua_requires",
                        "lua_floors", "long_files", "complexity" }) do
  local problems, err = try(name, FIXTURES .. "/clean")
  tap(problems and #problems == 0,
    "fixture clean/: " .. name .. " finds nothing",
    problems and table.concat(problems, "\n") or err)
end

catches("c_calls", "c-circle",
  "csrc/ping.c -> csrc/pong.c -> csrc/ping.c (ping.c uses pong; pong.c "
  .. "uses ping)", "fixture c-circle/: the call circle ping.c <-> pong.c "
  .. "is caught from the object files' symbols")
catches("c_includes", "include-circle",
  "csrc/first.h -> csrc/second.h -> csrc/first.h",
  "fixture include-circle/: the #include circle first.h <-> second.h "
  .. "is caught")
catches("lua_requires", "lua-circle",
  "pkg -> pkg.a -> pkg.b -> pkg (pkg/init.lua requires pkg.a; "
  .. "pkg/a.lua requires pkg.b; pkg/b.lua requires pkg)",
  "fixture lua-circle/: the require circle closed inside a function is "
  .. "caught (pkg is pkg/init.lua)")
catches("lua_floors", "upward",
  "lua/pkg/low.lua: pkg.low (floor 0) requires pkg.top (floor 2), a floor "
  .. "above it", "fixture upward/: a require of a module on a higher floor "
  .. "(no circle) is caught")
catches("complexity", "complex", "lua/complex.lua:4 M.count 16",
  "fixture complex/: a function of complexity 16 is caught")

-- 500 lines pass, 501 do not, in csrc/ and in lua/ (trees written here)
local function tree_of(name, lines)
  local dir = OUT .. "/" .. name
  assert(os.execute("rm -rf " .. q(dir) .. " && mkdir -p " .. q(dir)
    .. "/csrc " .. q(dir) .. "/lua"))
  local body = ("-- line\n"):rep(lines)
  write(dir .. "/lua/long.lua", body)
  write(dir .. "/csrc/long.h", body:gsub("%-%-", "//"))
  return dir
end
do
  local problems = check.long_files(tree_of("lines-500", 500))
  tap(#problems == 0, "500-line files in csrc/ and lua/ pass",
      table.concat(problems, "\n"))
  problems = check.long_files(tree_of("lines-501", 501))
  local text = table.concat(problems, "\n")
  tap(#problems == 2 and text:find("csrc/long.h: 501 lines", 1, true)
      and text:find("lua/long.lua: 501 lines", 1, true),
      "501-line files in csrc/ and lua/ are caught", text)
end

-- the tree itself, with the same functions
local rules = {
  { "c_calls", "no call circle among csrc/*.c (object files' symbols)" },
  { "c_includes", "no #include circle among csrc/*.c and *.h" },
  { "lua_requires", "no require circle among lua/**/*.lua" },
  { "lua_floors", "every Lua module on a floor of CONTRIBUTING.md, and no "
    .. "require of a module on a floor above" },
  { "long_files", "no file over " .. MAX_LINES .. " lines in csrc/ or lua/" },
  { "complexity", "no Lua function above cyclomatic complexity "
    .. MAX_COMPLEXITY .. " (file:line function complexity)" },
}
for _, r in ipairs(rules) do
  local problems, count = try(r[1], ROOT)
  if not problems then
    tap(false, "the tree: " .. r[2], count)
  else
    tap(#problems == 0 and count > 0, ("the tree: %s (%d files)")
      :format(r[2], count), count == 0 and "no file found"
      or table.concat(problems, "\n"))
  end
end

print("1.." .. n)
os.exit(failed == 0 and 0 or 1)
