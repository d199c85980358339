-- `make install` as a user runs it, into scratch trees (DESTDIR), then
-- the module loaded from those trees only:
--   * LUA_VERSION=5.1, 5.4 and luajit with the default PREFIX: every
--     file in its place, require "backoff" in lua5.1, lua5.4 and luajit
--     (the FFI path on), the installed backoff-delays;
--   * OpenResty's layout (LUA_CMODULE_DIR = LUA_MODULE_DIR = lualib, as
--     the README says for /usr/local/openresty), loaded by a real nginx
--     (127.0.0.1, a free port, under `timeout`, stopped by its pid);
--   * make uninstall leaves nothing behind: no file, and no directory
--     it created (those that were there before stay).
--   * make help lists the variables as well as the targets.
-- Every Lua runs in the scratch directory, outside the checkout, with
-- LUA_PATH and LUA_CPATH naming only the scratch tree (no ";;"), so
-- nothing of the checkout or of /usr/local can be picked up.  TAP.
--   lua5.4 spec/install/run.lua ROOT
local ROOT = assert(arg[1], "usage: run.lua ROOT")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local MAKE = os.getenv("MAKE") or "make"

local tap = H.tap()
local check = tap.check

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- output and success of a shell command (stderr included)
local function run(cmd)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"exit=$?\""))
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("exit=(%d+)%s*$"))
  return (out:gsub("exit=%d+%s*$", "")), code == 0
end

local SCRATCH = run("mktemp -d \"${TMPDIR:-/tmp}/backoff-install.XXXXXX\"")
  :gsub("%s+$", "")
assert(SCRATCH:match("^/"), "mktemp failed: " .. SCRATCH)
-- nginx workers run as nobody when the master is root: let them read
H.sh("chmod 755 " .. q(SCRATCH))

-- the files make install must write, relative to its DESTDIR
local MODULES = {}
for m in run("cd " .. q(ROOT .. "/lua") .. " && find . -name '*.lua' | sort")
    :gmatch("%./([^\n]+)") do
  MODULES[#MODULES + 1] = m
end

local function files_under(dir)
  local t = {}
  for f in run("cd " .. q(dir) .. " && find . -type f -o -type l | sort")
      :gmatch("%./([^\n]+)") do
    t[#t + 1] = f
  end
  return t
end

-- every directory below dir (not dir itself)
local function dirs_under(dir)
  local t = {}
  for f in run("cd " .. q(dir) .. " && find . -mindepth 1 -type d | sort")
      :gmatch("%./([^\n]+)") do
    t[#t + 1] = f
  end
  return t
end

local function same_set(got, want)
  local g = {}
  for _, f in ipairs(got) do g[f] = true end
  local missing, extra = {}, {}
  for _, f in ipairs(want) do
    if not g[f] then missing[#missing + 1] = f end
    g[f] = nil
  end
  for f in pairs(g) do extra[#extra + 1] = f end
  table.sort(extra)
  return #missing == 0 and #extra == 0,
    "missing: " .. table.concat(missing, " ") .. "\nextra: "
    .. table.concat(extra, " ")
end

-- a Lua environment with only the given paths: LUA_INIT and the
-- version-specific variables, which a Lua reads first, are removed
local function lua_env(lpath, cpath)
  local unset = ""
  for _, v in ipairs { "LUA_INIT", "LUA_INIT_5_2", "LUA_INIT_5_3",
      "LUA_INIT_5_4", "LUA_PATH_5_2", "LUA_PATH_5_3", "LUA_PATH_5_4",
      "LUA_CPATH_5_2", "LUA_CPATH_5_3", "LUA_CPATH_5_4" } do
    unset = unset .. " -u " .. v
  end
  return ("cd %s && env%s LUA_PATH=%s LUA_CPATH=%s "):format(q(SCRATCH),
    unset, q(lpath), q(cpath))
end

local CHECK_LOAD = [[
local lmod, cmod, jit_vm = ...
local searchpath = package.searchpath or function(name, path)  -- 5.1
  for t in path:gmatch("[^;]+") do
    local f = io.open((t:gsub("%?", (name:gsub("%.", "/")))))
    if f then f:close() return (t:gsub("%?", (name:gsub("%.", "/")))) end
  end
end
local b = require "backoff"
local src = debug.getinfo(b.recommended, "S").source
assert(src == "@" .. lmod .. "/backoff.lua", "backoff.lua from " .. src)
local so = searchpath("backoff.core", package.cpath)
assert(so == cmod .. "/backoff/core.so", "core.so from " .. tostring(so))
for name in pairs(package.loaded) do
  if name:match("^backoff%.") and name ~= "backoff.core" then
    local p = searchpath(name, package.path)
    assert(p and p:sub(1, #lmod) == lmod, name .. " from " .. tostring(p))
  end
end
local e = b.exponential { initial_delay = 1, max_delay = 4 }
assert(e:failure(0) == 1 and e:failure(0) == 2 and e:failure(0) == 4)
local calls = 0
local r = b.retry(b.constant { delay = 0, max_attempts = 3 }, function(n)
  calls = calls + 1
  if n < 3 then return nil, "no" end
  return "yes"
end)
assert(r == "yes" and calls == 3, tostring(r))
if jit_vm == "1" then
  local what = debug.getinfo(require("backoff.core").methods.failure,
    "S").what
  assert(what == "Lua", "the FFI fast path is off: failure is " .. what)
end
io.write(b._VERSION)
]]
local check_file = SCRATCH .. "/check_load.lua"
do
  local f = assert(io.open(check_file, "w"))
  f:write(CHECK_LOAD)
  f:close()
end

local LIMD_ARGS = "-a LIMD --initial-delay 2 --min-delay 1 "
  .. "--delay-increment-on-failure 4 --delay-multiple-on-success 0.2 "
  .. "0 0 0 1 1 1 0 0 0"
local LIMD = "2\n6\n10\n2\n1\n1\n5\n9\n13\n"

------------------------------------------------------------------------
-- default PREFIX, one tree per version

for _, v in ipairs { "5.1", "5.4", "luajit" } do
  local abi = v == "luajit" and "5.1" or v
  local lua = v == "luajit" and "luajit" or "lua" .. v
  local dest = SCRATCH .. "/" .. v
  -- for 5.4, two empty directories that were there before install:
  -- uninstall keeps them (it removes only those it created)
  local before = v == "5.4" and { "usr", "usr/local", "usr/local/bin",
    "usr/local/share", "usr/local/share/lua", "usr/local/share/lua/5.4" }
    or {}
  for _, d in ipairs(before) do H.sh("mkdir -p " .. q(dest .. "/" .. d)) end
  local out, ok = run(("%s -s -C %s install LUA_VERSION=%s DESTDIR=%s")
    :format(MAKE, q(ROOT), v, q(dest)))
  check(ok, "make install LUA_VERSION=" .. v .. " DESTDIR=<scratch>", out)

  local lmod = dest .. "/usr/local/share/lua/" .. abi
  local cmod = dest .. "/usr/local/lib/lua/" .. abi
  local want = { "usr/local/bin/backoff-delays",
    "usr/local/lib/lua/" .. abi .. "/backoff/core.so",
    "usr/local/share/lua/" .. abi .. "/backoff/.installed-dirs" }
  for _, m in ipairs(MODULES) do
    want[#want + 1] = "usr/local/share/lua/" .. abi .. "/" .. m
  end
  local same, detail = same_set(files_under(dest), want)
  check(same, ("%s: core.so in lib/lua/%s, the %d modules of lua/ in "
    .. "share/lua/%s, bin/backoff-delays, the record of the directories "
    .. "it created, nothing else"):format(v, abi, #MODULES, abi), detail)

  local env = lua_env(lmod .. "/?.lua", cmod .. "/?.so")
  out, ok = run(env .. lua .. " " .. q(check_file) .. " " .. q(lmod) .. " "
    .. q(cmod) .. " " .. (v == "luajit" and "1" or "0"))
  check(ok and out:match("^backoff %d"), ("%s, outside the checkout with "
    .. "only the scratch tree on its paths: require \"backoff\" loads "
    .. "it from there and works%s"):format(lua,
    v == "luajit" and " (FFI path on)" or ""), out)

  local bin = dest .. "/usr/local/bin/backoff-delays"
  local first = H.read_file(bin):match("^[^\n]*")
  out, ok = run(env .. q(bin) .. " " .. LIMD_ARGS)
  check(first == "#!/usr/bin/env " .. lua and ok and out == LIMD,
    "the installed backoff-delays runs " .. lua
    .. " and prints the LIMD example", first .. "\n" .. out)
  -- no outcome: the usage on stderr only, and exit status 2
  out = run(env .. q(bin) .. " -a exponential --initial-delay 1 2>"
    .. q(SCRATCH .. "/none.err") .. "; echo \"status=$?\"")
  local err = H.read_file(SCRATCH .. "/none.err")
  check(out:match("^status=2\n") and err:match("^backoff%-delays: no outcome")
    and err:find("\nusage: backoff-delays", 1, true),
    "the installed backoff-delays with no outcome prints the usage on "
    .. "stderr, nothing on stdout, and exits 2", out .. err)

  out, ok = run(("%s -s -C %s uninstall LUA_VERSION=%s DESTDIR=%s")
    :format(MAKE, q(ROOT), v, q(dest)))
  local left = files_under(dest)
  check(ok and #left == 0, "make uninstall LUA_VERSION=" .. v
    .. " removes every file it installed", out .. table.concat(left, " "))
  same, detail = same_set(dirs_under(dest), before)
  check(same, "make uninstall LUA_VERSION=" .. v .. " removes every "
    .. "directory it created"
    .. (#before > 0 and ", and keeps the empty ones that were there" or ""),
    detail)
end

------------------------------------------------------------------------
-- a PREFIX off the interpreter's default paths: backoff-delays still
-- finds its modules (it appends the install directories to its paths)

do
  local prefix = SCRATCH .. "/prefix"
  local out, ok = run(("%s -s -C %s install LUA_VERSION=5.4 PREFIX=%s")
    :format(MAKE, q(ROOT), q(prefix)))
  local env = lua_env("/nonexistent/?.lua", "/nonexistent/?.so")
  if ok then
    out, ok = run(env .. q(prefix .. "/bin/backoff-delays") .. " "
      .. LIMD_ARGS)
  end
  check(ok and out == LIMD, "make install PREFIX=<scratch>: backoff-delays "
    .. "finds its modules with LUA_PATH and LUA_CPATH pointing elsewhere", out)
  out, ok = run(("%s -s -C %s uninstall LUA_VERSION=5.4 PREFIX=%s")
    :format(MAKE, q(ROOT), q(prefix)))
  local _, exists = run("test -e " .. q(prefix))
  check(ok and not exists, "make uninstall PREFIX=<scratch> removes the "
    .. "PREFIX it created", out)
end

------------------------------------------------------------------------
-- OpenResty's layout, loaded by a real nginx

local OR = "/usr/local/openresty"
local dest = SCRATCH .. "/openresty"
local out, ok = run(("%s -s -C %s install LUA_VERSION=luajit "
  .. "LUA_INCLUDE_DIR=/usr/include/luajit-2.1 LUA_CMODULE_DIR=%s/lualib "
  .. "LUA_MODULE_DIR=%s/lualib LUA=%s/luajit/bin/luajit DESTDIR=%s")
  :format(MAKE, q(ROOT), OR, OR, OR, q(dest)))
check(ok, "make install into OpenResty's lualib (LUA_CMODULE_DIR = "
  .. "LUA_MODULE_DIR), DESTDIR=<scratch>", out)
local lualib = dest .. OR .. "/lualib"
local want = { "usr/local/bin/backoff-delays",
  "usr/local/openresty/lualib/backoff/core.so",
  "usr/local/openresty/lualib/backoff/.installed-dirs" }
for _, m in ipairs(MODULES) do
  want[#want + 1] = "usr/local/openresty/lualib/" .. m
end
local same, detail = same_set(files_under(dest), want)
check(same, "OpenResty: core.so and the modules side by side in lualib/",
  detail)
local first = H.read_file(dest .. "/usr/local/bin/backoff-delays")
  :match("^[^\n]*")
check(first == "#!" .. OR .. "/luajit/bin/luajit",
  "LUA=/path/to/luajit is backoff-delays' interpreter", first)

-- lua-resty-core alone (the nginx Lua module requires it at start)
local resty
for _, d in ipairs { "/usr/share/lua/5.1", "/usr/local/share/lua/5.1",
    OR .. "/lualib" } do
  if H.read_file(d .. "/resty/core.lua") ~= "" then resty = d break end
end
local deps = SCRATCH .. "/resty-only"
local PREFIX = SCRATCH .. "/nginx"
if not resty then
  check(false, "nginx: lua-resty-core found", "no resty/core.lua")
else
  H.sh(("mkdir -p %s && ln -s %s/resty %s/ngx %s/"):format(q(deps),
    q(resty), q(resty), q(deps)))
  local port = H.free_port()
  local started, err = H.start_nginx(PREFIX,
    ROOT .. "/spec/install/nginx.conf.in",
    { PORT = port, LUALIB = lualib, RESTY = deps }, 60,
    function() return H.get(port, "/ping", 2) == "pong\n" end)
  check(started, "nginx started with only the scratch lualib and "
    .. "lua-resty-core on its paths", err)
  local r = H.fields(H.get(port, "/check", 10), "\n")
  check(r.result == "done nil nil" and r.calls == "3",
    "nginx: backoff.retry from the installed tree retries and succeeds",
    r.result)
  check(r.lua == "@" .. lualib .. "/backoff.lua"
    and r.core == lualib .. "/backoff/core.so",
    "nginx: backoff.lua and core.so both come from the scratch lualib",
    (r.lua or "?") .. "\n" .. (r.core or "?"))
  check(r.path and not r.path:find(ROOT, 1, true)
    and r.cpath == lualib .. "/?.so",
    "nginx: no path into the checkout, the C path is the lualib only",
    (r.path or "?") .. "\n" .. (r.cpath or "?"))
  check(r.ffi == "Lua" and (r.version or ""):match("^backoff %d"),
    "nginx: " .. tostring(r.version) .. ", b:failure() on the FFI path",
    r.ffi)
  H.stop_nginx(PREFIX)
  local bad = H.errors_logged(PREFIX)
  check(#bad == 0, "nginx logged no error", table.concat(bad, "\n"))
end

out, ok = run(("%s -s -C %s uninstall LUA_VERSION=luajit "
  .. "LUA_CMODULE_DIR=%s/lualib LUA_MODULE_DIR=%s/lualib DESTDIR=%s")
  :format(MAKE, q(ROOT), OR, OR, q(dest)))
check(ok and #files_under(dest) == 0 and #dirs_under(dest) == 0,
  "make uninstall from OpenResty's lualib leaves no file and no directory",
  out .. table.concat(files_under(dest), " ") .. " "
  .. table.concat(dirs_under(dest), " "))

------------------------------------------------------------------------
-- make help: the targets and the variables of the header comment

do
  local help = run(("%s -s -C %s help"):format(MAKE, q(ROOT)))
  local missing = {}
  for _, v in ipairs { "LUA_VERSION", "V", "PREFIX", "DESTDIR",
      "LUA_INCLUDE_DIR", "LUA_CMODULE_DIR", "LUA_MODULE_DIR", "LUA_BIN_DIR",
      "BINDIR", "LUA", "CC", "CFLAGS", "LIBFLAG" } do
    if not help:find("\n  " .. v .. "[ ,]") and
       not help:find(", " .. v .. "[ ,]") then
      missing[#missing + 1] = v
    end
  end
  check(#missing == 0 and help:find("\nmake install ", 1, true),
    "make help lists the targets and the variables (LUA_VERSION, V, "
    .. "PREFIX, DESTDIR, ...)", "missing: " .. table.concat(missing, " "))
end

if not os.getenv("KEEP") then H.sh("rm -rf " .. q(SCRATCH)) end
tap.plan()
