-- The docs spec: every fenced code block of README.md and doc/*.md
-- runs as pasted, or is marked as a fragment and counted.  ```lua
-- blocks run on lua5.1, lua5.4 and luajit; ```lua nginx blocks in the
-- content phase of a stock nginx; ```nginx examples in an nginx of
-- their own with their Lua files, answering their curl requests;
-- ```console sessions command by command.  Output is compared where the
-- doc shows it.  The conventions: CONTRIBUTING.md ("Docs that run").
-- TAP; exit 1 when a block fails.  nginx runs on 127.0.0.1 only, under
-- `timeout`, and is stopped by its pid.
--   lua5.4 spec/docs/run.lua ROOT             the docs, examples/retry.lua,
--                                             and the proof that it fails
--   lua5.4 spec/docs/run.lua ROOT FILE.md...  those files only
-- Needs `make` for 5.1, 5.4 and luajit (make docs-test builds them).
local socket = require "socket"

local ROOT = assert(arg[1], "usage: run.lua ROOT [FILE.md ...]")
local H = dofile(ROOT .. "/spec/nginx/harness.lua")
local B = dofile(ROOT .. "/spec/docs/blocks.lua")
local CONSOLE = dofile(ROOT .. "/spec/docs/console.lua")
local WORK = os.getenv("DOCS_WORK") or (ROOT .. "/build/docs")
local VERBOSE = os.getenv("VERBOSE")

local LUAS = { { "lua5.1", "5.1" }, { "lua5.4", "5.4" },
               { "luajit", "luajit" } }
local MODULES = "load_module /usr/lib/nginx/modules/ndk_http_module.so;\n"
  .. "load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;\n"

local tap = H.tap(VERBOSE)
local failed = 0
local function check(ok, what, detail)
  if not ok then failed = failed + 1 end
  return tap.check(ok, what, detail)
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- runs a shell command; its exit status (a number)
local function status_of(cmd)
  local ok, how, code = os.execute(cmd)
  if type(ok) == "number" then return ok end -- Lua 5.1
  if how == "signal" then return 128 + code end
  return ok and 0 or code
end

local function slug(where) return (where:gsub("[^%w]", "-")) end

-- "expected" and "got", as # lines
local function diff(want, got)
  local t = { "the doc shows:" }
  for _, l in ipairs(want) do t[#t + 1] = "  | " .. l end
  t[#t + 1] = "it printed:"
  for _, l in ipairs(got) do t[#t + 1] = "  | " .. l end
  return table.concat(t, "\n")
end

-- the doc line of block `b` where a message points (`/NAME:N:`, NAME
-- the file the block was run as), or ""
local function doc_line(b, msg, file)
  local name = file:match("[^/]*$"):gsub("%p", "%%%0")
  local n = tonumber(msg:match("/" .. name .. ":(%d+):"))
  return n and ("(block line " .. n .. " is " .. b.file .. ":"
    .. (b.line + n) .. ")\n") or ""
end

------------------------------------------------------------------------
-- ```lua: a plain program on each Lua, LUA_PATH and LUA_CPATH at the
-- checkout's lua/ and build/<v>/ (as after `make`), from an empty
-- directory

local function lua_env(v)
  return ("LUA_PATH=%s LUA_CPATH=%s"):format(
    q(ROOT .. "/lua/?.lua;;"), q(ROOT .. "/build/" .. v .. "/?.so;;"))
end

local function missing_build(v)
  local so = ROOT .. "/build/" .. v .. "/backoff/core.so"
  if not io.open(so) then
    return "no " .. so .. ": run make LUA_VERSION=" .. v
  end
end

-- runs `cmd` (a shell command) in `dir` with `env`: status, stdout, stderr
local function run_in(dir, env, cmd, limit)
  local out, err = WORK .. "/stdout", WORK .. "/stderr"
  local status = status_of(("cd %s && %s timeout %d %s >%s 2>%s"):format(
    q(dir), env, limit or 60, cmd, q(out), q(err)))
  return status, H.read_file(out), H.read_file(err)
end

local function run_lua(u)
  local b = u.block
  local file = WORK .. "/blocks/" .. slug(u.where) .. ".lua"
  write(file, B.program(b))
  local problems = {}
  for _, l in ipairs(LUAS) do
    local lua, v = l[1], l[2]
    local missing = missing_build(v)
    if missing then
      problems[#problems + 1] = lua .. ": " .. missing
    else
      local status, out, err = run_in(WORK .. "/cwd", lua_env(v),
        lua .. " " .. q(file))
      if status ~= 0 then
        problems[#problems + 1] = lua .. ": exit status " .. status .. "\n"
          .. doc_line(b, err, file) .. err .. out
      elseif u.output and not B.matches(u.output.lines, B.lines(out)) then
        problems[#problems + 1] = lua .. ": the output differs from "
          .. B.where(u.output) .. "\n" .. diff(u.output.lines, B.lines(out))
      end
    end
  end
  return #problems == 0, table.concat(problems, "\n"),
    "```lua on lua5.1, lua5.4, luajit"
      .. (u.output and ", output as shown" or "")
end

------------------------------------------------------------------------
-- ```console: each `$ command` (lines ending in \ go on), then the
-- lines it prints; backoff-delays is the checkout's, on each Lua

local function console_steps(b)
  local steps, cur = {}, nil
  for _, line in ipairs(b.lines) do
    if cur and cur.open then
      cur.cmd = cur.cmd .. "\n" .. line
      cur.open = line:match("\\$") ~= nil
    elseif line:match("^%$ ") then
      cur = { cmd = line:sub(3), out = {} }
      cur.open = line:match("\\$") ~= nil
      steps[#steps + 1] = cur
    elseif cur then
      cur.out[#cur.out + 1] = line
    end
  end
  return steps
end

local function run_console(u)
  local steps = console_steps(u.block)
  local problems = {}
  if #steps == 0 then problems[1] = "no `$ command` line" end
  local tags = u.block.tags
  if #steps > 0 and (tags.dry or tags.checkout) then
    -- spec/docs/console.lua: from the checkout's root, or checked dry
    local ctx = { ROOT = ROOT, WORK = WORK, H = H, B = B, q = q,
                  run_in = run_in, lua_env = lua_env, diff = diff,
                  slug = slug }
    return CONSOLE[tags.dry and "dry" or "checkout"](u, ctx, steps)
  end
  for _, l in ipairs(LUAS) do
    local lua, v = l[1], l[2]
    local bin = WORK .. "/bin-" .. v
    H.sh("mkdir -p " .. q(bin))
    write(bin .. "/backoff-delays", ("#!/bin/sh\nexec %s %s \"$@\"\n")
      :format(lua, q(ROOT .. "/bin/backoff-delays")))
    H.sh("chmod +x " .. q(bin .. "/backoff-delays"))
    local env = lua_env(v) .. " PATH=" .. q(bin) .. ":\"$PATH\""
    for _, s in ipairs(steps) do
      local status, out, err = run_in(WORK .. "/cwd", env,
        "sh -c " .. q(s.cmd))
      if status ~= 0 then
        problems[#problems + 1] = lua .. ": `" .. s.cmd .. "` exit status "
          .. status .. "\n" .. err
      elseif not B.matches(s.out, B.lines(out)) then
        problems[#problems + 1] = lua .. ": `" .. s.cmd .. "`\n"
          .. diff(s.out, B.lines(out))
      end
    end
  end
  return #problems == 0, table.concat(problems, "\n"),
    "```console, " .. #steps .. " commands on lua5.1, lua5.4, luajit"
end

------------------------------------------------------------------------
-- nginx

local function wait_for_port(port)
  for _ = 1, 100 do
    local c = socket.tcp()
    c:settimeout(0.2)
    if c:connect("127.0.0.1", port) then
      c:close()
      return true
    end
    c:close()
    socket.sleep(0.05)
  end
end

-- starts nginx in `prefix` with conf/nginx.conf, under `timeout`; true
-- once `port` accepts, else nil and what nginx said
local function start_nginx(prefix, port)
  H.sh(("timeout 120 %s -p %s -c conf/nginx.conf -g 'daemon off;' "
    .. ">%s 2>&1 &"):format(H.NGINX, q(prefix .. "/"),
    q(prefix .. "/logs/stdout")))
  if wait_for_port(port) then return true end
  return nil, H.read_file(prefix .. "/logs/stdout")
    .. H.read_file(prefix .. "/logs/error.log")
end

-- the error log's lines of level error or worse after byte `from`
local function errors_since(prefix, from)
  local log = H.read_file(prefix .. "/logs/error.log"):sub(from + 1)
  local bad = {}
  for line in log:gmatch("[^\n]+") do
    if line:match("%[error%]") or line:match("%[crit%]")
       or line:match("%[alert%]") or line:match("%[emerg%]") then
      bad[#bad + 1] = line
    end
  end
  return bad
end

-- ```lua nginx: every block is a content handler of one stock nginx,
-- GET /docs/N, which runs it after emptying the dicts; /upstream
-- answers 503 "busy" (with Retry-After: ?retry_after) on the odd calls
-- of a block, 200 "hello from the upstream" on the even ones
local STOCK_CONF = [[
worker_processes 1;
error_log @PREFIX@/logs/error.log warn;
pid @PREFIX@/logs/nginx.pid;
@MODULES@
events { worker_connections 256; }
http {
  access_log @PREFIX@/logs/access.log;
  lua_package_path "@ROOT@/lua/?.lua;;";
  lua_package_cpath "@ROOT@/build/luajit/?.so;;";
  lua_shared_dict retry_budget 1m;
  lua_shared_dict backoff_metrics 1m;
  lua_shared_dict breaker 1m;
  lua_shared_dict docs_upstream 1m;
  server {
    listen 127.0.0.1:@PORT@;
    location ~ ^/docs/(\d+)$ {
      rewrite_by_lua_block {
        for _, name in ipairs { "retry_budget", "backoff_metrics",
                                "breaker", "docs_upstream" } do
          ngx.shared[name]:flush_all()
        end
      }
      content_by_lua_file @PREFIX@/blocks/$1.lua;
    }
    location /upstream {
      content_by_lua_block {
        local n = ngx.shared.docs_upstream:incr("calls", 1, 0)
        if n % 2 == 1 then
          ngx.status = 503
          ngx.header["Retry-After"] = ngx.var.arg_retry_after
          return ngx.say("busy")
        end
        ngx.say("hello from the upstream")
      }
    }
  }
}
]]

local stock -- { prefix, port, n } once started; false when it failed

local function stock_nginx()
  if stock ~= nil then return stock end
  local prefix, port = WORK .. "/stock", H.free_port()
  H.sh("mkdir -p " .. q(prefix .. "/conf") .. " " .. q(prefix .. "/logs")
    .. " " .. q(prefix .. "/blocks"))
  local vars = { PREFIX = prefix, ROOT = ROOT, PORT = port,
                 MODULES = MODULES }
  write(prefix .. "/conf/nginx.conf", (STOCK_CONF:gsub("@(%u+)@", vars)))
  local ok, why = start_nginx(prefix, port)
  stock = ok and { prefix = prefix, port = port, n = 0 } or false
  return stock, why
end

local function run_lua_nginx(u)
  local b = u.block
  local what = "```lua nginx, in the content phase"
    .. (u.output and ", output as shown" or "")
  local s, why = stock_nginx()
  if not s then return false, "the stock nginx did not start\n"
    .. tostring(why), what end
  s.n = s.n + 1
  local file = s.prefix .. "/blocks/" .. s.n .. ".lua"
  write(file, B.program(b))
  local from = #H.read_file(s.prefix .. "/logs/error.log")
  local body, status = H.get(s.port, "/docs/" .. s.n, 30)
  socket.sleep(0.05)
  local errors = errors_since(s.prefix, from)
  local problems = {}
  if status ~= 200 then
    problems[1] = "GET answered " .. tostring(status) .. " (want 200)"
  end
  if #errors > 0 then
    problems[#problems + 1] = doc_line(b, errors[1], file)
      .. "the error log says:\n" .. table.concat(errors, "\n")
  end
  if status == 200 and u.output
     and not B.matches(u.output.lines, B.lines(body or "")) then
    problems[#problems + 1] = "the body differs from "
      .. B.where(u.output) .. "\n"
      .. diff(u.output.lines, B.lines(body or ""))
  end
  return #problems == 0, table.concat(problems, "\n"), what
end

-- an ```nginx example: its config (complete, or an http-block the
-- harness wraps), each listen port a free one (and that number
-- everywhere in the example), the checkout's lua/ and build/luajit/
-- and the prefix first in the package paths, its `-- file:` blocks
-- in the prefix, its curl requests made and compared

local function substitute_ports(s, ports)
  return (s:gsub("%f[%w](%d+)%f[%W]", function(d) return ports[d] end))
end

local function nginx_conf(u, prefix, ports)
  local b = u.block
  local conf = substitute_ports(table.concat(b.lines, "\n"), ports)
  conf = conf:gsub("(listen%s+)([^;%s]+)", function(pre, addr)
    return pre .. "127.0.0.1:" .. addr:match("(%d+)$")
  end)
  -- the checkout's first; the example's own paths after them (where it
  -- has none, the prefix, for its `-- file:` blocks)
  local paths = { lua_package_path = { ROOT .. "/lua/?.lua;", prefix
    .. "/?.lua;" }, lua_package_cpath = { ROOT .. "/build/luajit/?.so;",
    "" } }
  local extra = {}
  for name, ours in pairs(paths) do
    local n
    conf, n = conf:gsub("(" .. name:gsub("_", "%%_") .. "%s+)([\"'])",
      function(d, quote) return d .. quote .. ours[1] end)
    if n == 0 then
      extra[#extra + 1] = name .. ' "' .. ours[1] .. ours[2] .. ';";'
    end
  end
  table.sort(extra)
  local at_http = table.concat(extra, "\n")
  if b.tags["http-block"] then
    return ("# %s, wrapped by spec/docs/run.lua\nworker_processes 2;\n"
      .. "error_log %s/logs/error.log warn;\npid %s/logs/nginx.pid;\n%s"
      .. "events { worker_connections 256; }\nhttp {\naccess_log "
      .. "%s/logs/access.log;\n%s\n%s\n}\n"):format(u.where, prefix,
      prefix, MODULES, prefix, at_http, conf)
  end
  local pid = "pid " .. prefix .. "/logs/nginx.pid;"
  local n
  conf, n = conf:gsub("%f[%w]pid%s+[^;]+;", pid)
  if n == 0 then conf = pid .. "\n" .. conf end
  if not conf:find("access_log", 1, true) then
    at_http = at_http .. "\naccess_log " .. prefix .. "/logs/access.log;"
  end
  conf = conf:gsub("(%f[%w]http%s*{)", "%1\n" .. at_http:gsub("%%", "%%%%")
    .. "\n", 1)
  return "error_log " .. prefix .. "/logs/error.log warn;\n" .. conf
end

local function run_requests(u, prefix, ports)
  local problems = {}
  for _, r in ipairs(u.requests) do
    local out = {}
    for _, line in ipairs(r.block.lines) do
      if line:match("^%s*curl%s") then
        local cmd = substitute_ports(line, ports)
        local status, stdout, err = run_in(prefix, "", "sh -c " .. q(cmd), 30)
        if status ~= 0 then
          problems[#problems + 1] = "`" .. cmd .. "`: exit status "
            .. status .. "\n" .. err
        end
        out[#out + 1] = stdout
      end
    end
    local got = B.lines(table.concat(out))
    if r.output and not B.matches(r.output.lines, got) then
      problems[#problems + 1] = "the answers to " .. B.where(r.block)
        .. " differ from " .. B.where(r.output) .. "\n"
        .. diff(r.output.lines, got)
    end
  end
  return problems
end

local function run_nginx(u)
  local prefix = WORK .. "/nginx-" .. slug(u.where)
  H.sh("rm -rf " .. q(prefix) .. " && mkdir -p " .. q(prefix .. "/conf")
    .. " " .. q(prefix .. "/logs"))
  local ports, first = {}, nil
  for addr in table.concat(u.block.lines, "\n"):gmatch("listen%s+([^;%s]+)") do
    local p = addr:match("(%d+)$")
    if p and not ports[p] then
      ports[p] = tostring(H.free_port())
      first = first or ports[p]
    end
  end
  local names = {}
  for _, f in ipairs(u.files) do
    names[#names + 1] = B.file_name(f)
    write(prefix .. "/" .. B.file_name(f),
      substitute_ports(B.program(f), ports))
  end
  local what = "```nginx" .. (u.block.tags["http-block"] and " http-block"
    or "") .. (#names > 0 and ", " .. table.concat(names, ", ") or "")
    .. ", " .. #u.requests .. " curl block(s)"
  if not first then return false, "no listen directive", what end
  write(prefix .. "/conf/nginx.conf", nginx_conf(u, prefix, ports))
  local ok, why = start_nginx(prefix, tonumber(first))
  if not ok then
    H.stop_nginx(prefix)
    return false, "nginx did not start (" .. prefix .. "/conf/nginx.conf)\n"
      .. why, what
  end
  local problems = run_requests(u, prefix, ports)
  socket.sleep(0.1)
  local errors = errors_since(prefix, 0)
  if #errors > 0 then
    problems[#problems + 1] = "the error log says:\n"
      .. table.concat(errors, "\n")
  end
  H.stop_nginx(prefix)
  return #problems == 0, table.concat(problems, "\n"), what
end

------------------------------------------------------------------------

local RUN = { lua = run_lua, ["lua-nginx"] = run_lua_nginx,
              console = run_console, nginx = run_nginx }

-- the line of a failure's detail that says most: the first error
-- message of Lua's, else the first line
local function first_line(s)
  local line = s:match("[^\n]*%.lua:%d+: ([^\n]*)")
    or s:match("[^\n]*[^\n%s][^\n]*") or s
  return line:sub(1, 160)
end

-- runs one unit and prints its TAP line; its kind for the counts
local function run_unit(u)
  if u.kind == "bad" then
    check(false, u.where .. ": " .. u.why)
    return "bad"
  end
  local ok, detail, what = RUN[u.kind](u)
  if u.pending then
    -- written for an API change not merged yet: it must fail now, and
    -- the marker must go as soon as it runs
    if ok then
      check(false, u.where .. " " .. what .. ": runs, but is marked "
        .. "`pending`: remove the marker")
    else
      tap.skip(u.where .. " " .. what, "pending: written for an API "
        .. "change not merged yet; fails now: " .. first_line(detail))
    end
    return "pending"
  end
  check(ok, u.where .. " " .. what, detail)
  return u.kind
end

local function docs_of_root()
  local list = { "README.md" }
  local p = io.popen("cd " .. q(ROOT) .. " && ls doc/*.md")
  for f in p:read("*a"):gmatch("[^\n]+") do list[#list + 1] = f end
  p:close()
  return list
end

-- examples/retry.lua runs with no LUA_PATH or LUA_CPATH, from the root
-- and from elsewhere, as the README says
local function check_example()
  local problems = {}
  for _, l in ipairs(LUAS) do
    local missing = missing_build(l[2])
    for _, dir in ipairs { ROOT, WORK .. "/cwd" } do
      local path = dir == ROOT and "examples/retry.lua"
        or ROOT .. "/examples/retry.lua"
      local status, out, err = run_in(dir, "env -u LUA_PATH -u LUA_CPATH"
        .. " -u LUA_PATH_5_4 -u LUA_CPATH_5_4", l[1] .. " " .. q(path))
      local want = { "...", "runner:\tconnected",
                     "...", "by hand:\tconnected\tafter 2 failures" }
      if missing or status ~= 0 or not B.matches(want, B.lines(out)) then
        problems[#problems + 1] = l[1] .. " " .. path .. ": "
          .. (missing or ("exit status " .. status .. "\n" .. err .. out))
      end
    end
  end
  check(#problems == 0, "examples/retry.lua runs as it is (no LUA_PATH, "
    .. "no LUA_CPATH) from the root and from elsewhere, on lua5.1, "
    .. "lua5.4, luajit", table.concat(problems, "\n"))
end

-- The harness fails on spec/docs/fixtures/broken.md: every block after
-- `<!-- expect: fail -->` is reported `not ok`, after
-- `<!-- expect: ok -->` `ok`, and the run exits non-zero.
local function check_fixture()
  local rel = "spec/docs/fixtures/broken.md"
  local text = H.read_file(ROOT .. "/" .. rel)
  local expect, n, prev = {}, 0, nil
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    if prev and line:match("^```") then expect[#expect + 1] = { n, prev } end
    prev = line:match("^<!%-%- expect: (%a+) %-%->$")
  end
  local out = WORK .. "/fixture.tap"
  local status = status_of(("cd %s && DOCS_WORK=%s timeout 200 lua5.4 "
    .. "spec/docs/run.lua %s %s >%s 2>&1"):format(q(ROOT),
    q(WORK .. "/fixture"), q(ROOT), rel, q(out)))
  local tap_out = H.read_file(out)
  check(status == 1, "the harness exits 1 on " .. rel .. " (exit status "
    .. status .. ")", tap_out)
  for _, e in ipairs(expect) do
    local where = rel .. ":" .. e[1]
    local line
    for l in tap_out:gmatch("[^\n]+") do
      local rest = l:match("^n?o?t? ?ok %d+ %- (.*)$")
      if rest and (rest:sub(1, #where + 1) == where .. " "
                   or rest:sub(1, #where + 1) == where .. ":") then
        line = l
      end
    end
    local got = line and (line:match("^not ok") and "fail" or "ok")
    check(got == e[2], "the harness reports " .. where .. " as "
      .. (e[2] == "fail" and "failing" or "passing") .. ": "
      .. tostring(line), tap_out)
  end
  check(#expect >= 6 and tap_out:match("\nok %d+ %- 1 block marked "
    .. "fragment"), "the harness counts the fixture's fragment and checks "
    .. #expect .. " expectations", tap_out)
end

------------------------------------------------------------------------

H.sh("rm -rf " .. q(WORK) .. " && mkdir -p " .. q(WORK .. "/blocks") .. " "
  .. q(WORK .. "/cwd"))
local files = { select(2, ...) }
local whole = #files == 0
if whole then files = docs_of_root() end

local counts, per_file, fragments, texts = {}, {}, {}, 0
for _, rel in ipairs(files) do
  local text = H.read_file(ROOT .. "/" .. rel)
  if text == "" then check(false, rel .. ": cannot be read") end
  local blocks = B.extract(rel, text)
  local ran, frag, text_here = 0, 0, 0
  for _, u in ipairs(B.classify(blocks)) do
    if u.kind == "fragment" then
      fragments[#fragments + 1] = u.where .. " (" .. u.block.info .. ")"
      frag = frag + 1
    elseif u.kind == "text" then
      texts, text_here = texts + 1, text_here + 1
    else
      local kind = run_unit(u)
      counts[kind] = (counts[kind] or 0) + 1
      ran = ran + 1
    end
  end
  per_file[#per_file + 1] = ("%s: %d blocks: %d run (as %d units), %d "
    .. "fragments, %d text"):format(rel, #blocks, #blocks - frag - text_here,
    ran, frag, text_here)
end
if stock then H.stop_nginx(stock.prefix) end

check(true, #fragments .. " block" .. (#fragments == 1 and "" or "s")
  .. " marked fragment (not run); " .. texts .. " ```text",
  table.concat(fragments, "\n"))
if not VERBOSE then
  for _, f in ipairs(fragments) do print("#   fragment: " .. f) end
end
if whole then
  check_example()
  check_fixture()
end
local kinds = {}
for kind, n in pairs(counts) do kinds[#kinds + 1] = kind .. " " .. n end
table.sort(kinds)
print("# blocks run, by kind: " .. table.concat(kinds, ", "))
for _, f in ipairs(per_file) do print("#   " .. f) end
tap.plan()
os.exit(failed == 0 and 0 or 1)
