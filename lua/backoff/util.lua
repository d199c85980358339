-- backoff.util: small helpers the Lua modules share (internal: not part
-- of the API).  At the bottom of the Lua half: it requires nothing.

local getmetatable, ipairs, pcall, setmetatable, type =
      getmetatable, ipairs, pcall, setmetatable, type

local M = {}

-- the longest timeout nginx takes, in milliseconds: a cosocket's
-- settimeout(s) answers "bad timeout value" above it, and the balancer's
-- set_timeouts hands nginx a C long (2^31 - 1 ms: 24.8 days)
M.MAX_TIMEOUT_MS = 2 ^ 31 - 1

-- v may be called: a function, or a value whose metatable has __call
function M.callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil
end

local callable = M.callable

-- v[name] (indexing a userdata may raise)
local function index(v, name) return v[name] end

-- v is a table or userdata whose v[name] may be called
function M.has_method(v, name)
  local t = type(v)
  if t ~= "table" and t ~= "userdata" then return false end
  local ok, m = pcall(index, v, name)
  return ok and callable(m)
end

-- Why v cannot serve as a budget, nil when it can: it needs withdraw,
-- and record (told of every attempt) or deposit (told of successes);
-- record, deposit, allows and throttle_cost, the other methods the
-- runner and the balancer call when v has them, must be methods, or
-- the call would fail with a raw "attempt to call" after fn ran (cost
-- and tokens may be data: a number cost is the cost, and tokens() is
-- called only when it is a method).  A budget found good is
-- remembered (weakly): the runner checks ropts at every call, and a
-- budget is a long-lived object, so the good day pays one lookup.
local OPTIONAL_METHODS = { "record", "deposit", "allows", "throttle_cost" }
local good_budgets = setmetatable({}, { __mode = "k" })
local function budget_problem(v)
  local t = type(v)
  if t ~= "table" and t ~= "userdata" then return t end
  if t == "userdata" and getmetatable(v) == nil then
    return "a userdata without methods"
  end
  if not M.has_method(v, "withdraw") then
    return t .. " without a withdraw method"
  end
  if not M.has_method(v, "record") and not M.has_method(v, "deposit") then
    return t .. " without a record or deposit method"
  end
  for _, name in ipairs(OPTIONAL_METHODS) do
    local ok, m = pcall(index, v, name)
    if not ok then return t .. " whose " .. name .. " cannot be read" end
    if m ~= nil and not callable(m) then
      return t .. " whose " .. name .. " is a " .. type(m) .. ", not a method"
    end
  end
  good_budgets[v] = true
  return nil
end

function M.budget_problem(v)
  if good_budgets[v] then return nil end
  return budget_problem(v)
end

-- a budget's cost per retry: its cost() method or cost field, if any
-- (nil: withdraw's own default)
function M.budget_cost(bud)
  local c = bud.cost
  if type(c) == "function" then return c(bud) end
  if type(c) == "number" then return c end
  return nil
end

return M
