-- backoff.util: small helpers the Lua modules share (internal: not part
-- of the API).  At the bottom of the Lua half: it requires nothing.

local getmetatable, pcall, type = getmetatable, pcall, type

local M = {}

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

-- a budget's cost per retry: its cost() method or cost field, if any
-- (nil: withdraw's own default)
function M.budget_cost(bud)
  local c = bud.cost
  if type(c) == "function" then return c(bud) end
  if type(c) == "number" then return c end
  return nil
end

return M
