-- The docs spec's ```console blocks that do not run on each Lua from an
-- empty directory (spec/docs/run.lua runs the plain ones):
--
--   ```console checkout: run once, from the checkout's root, as a user
--     who has just built it would: the ports 8080 and 8081 in the
--     commands and in their output become free ones, also given as PORT
--     and UPSTREAM_PORT, and PREFIX is a directory of its own under
--     build/docs (examples/openresty/gateway.sh takes all three); an
--     nginx it left running is stopped by its pid, and nothing at
--     `error` or worse may be in its error log;
--   ```console dry: commands that need root or the network (apt-get,
--     make install, luarocks), checked without being run: apt-get
--     install comes after apt-get update and names packages apt knows;
--     make's targets and variables pass `make -n`; luarocks' subcommand
--     exists and a rockspec it names is in the checkout; `lua5.x` and
--     `luajit` commands run, with the checkout's paths for that Lua,
--     their output compared; `mkdir` runs in a scratch directory; an
--     example's start (`nginx -p ... -c ...`, which its harness does the
--     same way) and stop (`kill -QUIT "$(cat PIDFILE)"`) are taken as
--     they are; a command it cannot check is an error.
--
-- The conventions: CONTRIBUTING.md ("Docs that run").
local C = {}

-- ctx: { ROOT, WORK, H, B, q, run_in, lua_env, diff, slug }

-- a command's words (quotes kept together, not unquoted)
local function words(cmd)
  local t, rest = {}, cmd:gsub("\\\n", " ")
  while true do
    rest = rest:gsub("^%s+", "")
    if rest == "" then break end
    local w = rest:match("^'[^']*'%S*") or rest:match('^"[^"]*"%S*')
      or rest:match("^%S+")
    t[#t + 1] = w
    rest = rest:sub(#w + 1)
  end
  return t
end
C.words = words

-- the parts of `a && b && c`
local function parts(cmd)
  local t = {}
  for p in (cmd .. "&&"):gmatch("(.-)&&") do
    p = p:gsub("^%s+", ""):gsub("%s+$", "")
    if p ~= "" then t[#t + 1] = p end
  end
  return t
end

local LUA_OF = { ["lua5.1"] = "5.1", ["lua5.2"] = "5.2", ["lua5.3"] = "5.3",
                 ["lua5.4"] = "5.4", luajit = "luajit" }

-- make's targets and variables, as `make help` lists them (make -n
-- would run the recursive makes of `make test`)
local help
local function make_problem(ctx, w)
  if help == nil then
    local _, out = ctx.run_in(ctx.ROOT, "", "make -s help")
    help = "\n" .. out
  end
  local vars = {}
  for i = 2, #w do
    local var = w[i]:match("^([%u_]+)=")
    if var then
      vars[#vars + 1] = w[i]
      if not (help:find("\n  " .. var .. " ", 1, true)
              or help:find("\n  " .. var .. ",", 1, true)
              or help:find(", " .. var .. " ", 1, true)) then
        return "`make help` lists no variable " .. var
      end
    elseif w[i]:sub(1, 1) == "-" then
      return "make option " .. w[i] .. ": not checked"
    elseif not (help:find("\nmake " .. w[i] .. " ", 1, true)
                or help:find(", make " .. w[i] .. " ", 1, true)) then
      return "`make help` lists no target " .. w[i]
    end
  end
  -- the values: `make print` with them
  local status, out, err = ctx.run_in(ctx.ROOT, "", "make -s print "
    .. table.concat(vars, " "))
  if status ~= 0 then
    return "`make print " .. table.concat(vars, " ") .. "` exit status "
      .. status .. "\n" .. err .. out
  end
  return nil
end

-- one part of a dry command: nil, or what is wrong
local function dry_part(ctx, p, state, s)
  p = p:gsub("%s+#.*$", "")             -- a comment after the command
  local w = words(p)
  local cmd, q = w[1], ctx.q
  if cmd == "apt-get" and w[2] == "update" then
    state.updated = true
    return nil
  elseif cmd == "apt-get" and w[2] == "install" then
    if not state.updated then
      return "`apt-get install` with no `apt-get update` before it: on a "
        .. "fresh machine the package lists are empty"
    end
    for i = 3, #w do
      if w[i]:sub(1, 1) ~= "-" and not ctx.H.sh("apt-cache show " .. q(w[i])
          .. " >/dev/null 2>&1") then
        return "apt does not know the package " .. w[i]
      end
    end
    return nil
  elseif cmd == "make" then
    return make_problem(ctx, w)
  elseif cmd == "luarocks" then
    local sub
    for i = 2, #w do
      if w[i]:sub(1, 1) ~= "-" and w[i - 1] ~= "--lua-version" then
        sub = sub or w[i]
        if w[i]:match("%.rockspec$") and
           not io.open(ctx.ROOT .. "/" .. w[i]) then
          return "no " .. w[i] .. " in the checkout"
        end
      end
    end
    if not sub or not ctx.H.sh("luarocks help " .. q(sub) .. " >/dev/null"
        .. " 2>&1") then
      return "luarocks has no subcommand " .. tostring(sub)
    end
    return nil
  elseif cmd == "eval" and p:match('^eval "%$%((luarocks [^)]*path)%)"$')
  then
    local lr = p:match('^eval "%$%((luarocks [^)]*path)%)"$')
    local status = ctx.run_in(ctx.WORK .. "/cwd", "", lr)
    if status ~= 0 then return "`" .. lr .. "` exit status " .. status end
    return nil
  elseif cmd == "cd" and #w == 2 then
    return nil                          -- where the next part runs
  elseif cmd == "mkdir" then            -- in a scratch directory
    local status = ctx.run_in(ctx.WORK .. "/cwd", "", p)
    if status ~= 0 then return "`" .. p .. "` exit status " .. status end
    return nil
  elseif cmd == "nginx" then
    -- an example's start: its harness starts the config the same way
    -- (-p, -c); here, that this nginx takes the options
    for i = 2, #w do
      if w[i]:match("^%-") and not (w[i] == "-p" or w[i] == "-c"
                                    or w[i] == "-g") then
        return "nginx option " .. w[i] .. ": not checked"
      end
    end
    if not ctx.H.sh(ctx.H.NGINX .. " -v 2>/dev/null") then
      return "no nginx at " .. ctx.H.NGINX
    end
    return nil
  elseif cmd == "kill" and p:match('^kill %-QUIT "%$%(cat [%w_./-]+%.pid%)"$')
  then
    return nil                          -- an example's stop, by its pid
  elseif LUA_OF[cmd] then
    local v = LUA_OF[cmd]
    local status, out, err = ctx.run_in(ctx.WORK .. "/cwd", ctx.lua_env(v),
                                        "sh -c " .. q(p))
    if status ~= 0 then
      return "`" .. p .. "` exit status " .. status .. "\n" .. err
    end
    state.printed = true
    if not ctx.B.matches(s.out, ctx.B.lines(out)) then
      return "`" .. p .. "`\n" .. ctx.diff(s.out, ctx.B.lines(out))
    end
    return nil
  end
  return "`" .. p .. "`: a command the dry check cannot check (run it in "
    .. "a ```console block, or teach spec/docs/console.lua)"
end

--- C.dry(u, ctx, steps) -> ok, detail, what
function C.dry(_, ctx, steps)
  local problems, state = {}, {}
  for _, s in ipairs(steps) do
    state.printed = false
    for _, p in ipairs(parts(s.cmd)) do
      local why = dry_part(ctx, p, state, s)
      if why then problems[#problems + 1] = why end
    end
    if not state.printed and #s.out > 0 then
      problems[#problems + 1] = "`" .. s.cmd .. "` is not run: it shows "
        .. "no output to compare"
    end
  end
  return #problems == 0, table.concat(problems, "\n"),
    "```console dry, " .. #steps .. " commands checked"
end

--- C.checkout(u, ctx, steps) -> ok, detail, what
function C.checkout(u, ctx, steps)
  local H, q = ctx.H, ctx.q
  local ports = { ["8080"] = tostring(H.free_port()),
                  ["8081"] = tostring(H.free_port()) }
  local function sub(s)
    return (s:gsub("%f[%w](808[01])%f[%W]", ports))
  end
  local prefix = ctx.WORK .. "/checkout-" .. ctx.slug(u.where)
  H.sh("rm -rf " .. q(prefix))
  local env = ("PORT=%s UPSTREAM_PORT=%s PREFIX=%s"):format(ports["8080"],
    ports["8081"], q(prefix))
  local problems = {}
  for _, s in ipairs(steps) do
    local cmd = sub(s.cmd)
    local status, out, err = ctx.run_in(ctx.ROOT, env, "sh -c " .. q(cmd))
    local want = {}
    for i, l in ipairs(s.out) do want[i] = sub(l) end
    local got = ctx.B.lines((out:gsub("\r\n", "\n")))
    if status ~= 0 then
      problems[#problems + 1] = "`" .. cmd .. "` exit status " .. status
        .. "\n" .. err .. out
    elseif not ctx.B.matches(want, got) then
      problems[#problems + 1] = "`" .. cmd .. "`\n" .. ctx.diff(want, got)
    end
  end
  H.stop_nginx(prefix)
  local errors = H.errors_logged(prefix)
  if #errors > 0 then
    problems[#problems + 1] = "the error log says:\n"
      .. table.concat(errors, "\n")
  end
  return #problems == 0, table.concat(problems, "\n"),
    "```console checkout, " .. #steps .. " commands from the checkout"
end

return C
