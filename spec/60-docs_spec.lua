-- The user docs are complete and say what the code does: every public
-- name of the module, of its objects and of every strategy's options is
-- in the reference (doc/backoff.md, doc/systems.md), every give-up
-- reason the library returns is named somewhere in doc/, and no user doc
-- carries project history (issue numbers, rounds, commit hashes).
local backoff = require "backoff"
local core = require "backoff.core"

-- the docs beside this spec's directory; nil where the tree has none
-- (the copy `make rock-test` runs the specs from has them too)
local root = (debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./")
  .. "../"

local function read(path)
  local f = io.open(root .. path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local DOCS = { "README.md", "doc/backoff.md", "doc/systems.md",
  "doc/retry.md", "doc/budget.md", "doc/http.md", "doc/balancer.md",
  "doc/metrics.md", "doc/retry_after.md", "doc/cli.md", "doc/quickstart.md",
  "doc/hedge.md", "doc/breaker.md", "doc/install.md" }

local function all_docs()
  local t = {}
  for _, path in ipairs(DOCS) do t[path] = assert(read(path), path) end
  return t
end

-- a `**syntax:**` line that calls name(  (or names it, for a value)
local function has_syntax(doc, name)
  for line in doc:gmatch("%*%*syntax:%*%*[^\n]*") do
    if line:find(name, 1, true) then return true end
  end
  return false
end

describe("the user docs", function()
  if not read("doc/backoff.md") then
    it("are not in this copy of the tree", function()
      pending("doc/ is not here")
    end)
    return
  end
  local docs = all_docs()
  local reference = docs["doc/backoff.md"] .. docs["doc/systems.md"]

  it("give every module function a syntax line (and each strategy its "
     .. "constructor)", function()
    local strategy = {}
    for _, s in ipairs(backoff.strategies) do strategy[s] = true end
    local n = 0
    for name, v in pairs(backoff) do
      if not name:match("^_") and type(v) ~= "string" then
        n = n + 1
        if strategy[name] then
          assert.truthy(reference:find("`backoff." .. name .. "`", 1, true)
            or reference:find("backoff." .. name .. "(", 1, true)
            or docs["doc/backoff.md"]:find("`" .. name .. "`", 1, true),
            name)
        else
          assert.is_true(has_syntax(reference .. docs["doc/retry.md"],
            "backoff." .. name), "backoff." .. name)
        end
      end
    end
    assert.is_true(n >= 20)
  end)

  it("give every method of an object a syntax line", function()
    local methods = getmetatable(backoff.constant { delay = 1 }).__index
    local n = 0
    for name in pairs(methods) do
      n = n + 1
      assert.is_true(has_syntax(docs["doc/backoff.md"], "b:" .. name),
        "b:" .. name)
    end
    assert.is_true(n >= 11)
  end)

  it("name every option of every strategy", function()
    local n = 0
    for s, names in pairs(core._options) do
      for _, name in ipairs(names) do
        n = n + 1
        assert.truthy(reference:find("`" .. name .. "`", 1, true)
          or reference:find(name .. " = ", 1, true), s .. ": " .. name)
      end
    end
    assert.is_true(n >= 200)
  end)

  it("name every give-up reason the library returns", function()
    local text = table.concat({ docs["doc/backoff.md"], docs["doc/retry.md"],
      docs["doc/http.md"], docs["doc/balancer.md"], docs["doc/budget.md"] })
    for _, reason in ipairs { "max_attempts", "max_actual_duration",
        "retry_after", "retry_on", "budget", "not_idempotent" } do
      assert.truthy(text:find('"' .. reason .. '"', 1, true)
        or text:find("`" .. reason .. "`", 1, true), reason)
    end
  end)

  it("carry no project history: no issue numbers, rounds or commits",
    function()
      for path, text in pairs(docs) do
        local lower = text:lower()
        assert.falsy(lower:find("issue %d"), path)
        assert.falsy(lower:find("this round") or lower:find("first round")
          or lower:find("second round") or lower:find("third round"), path)
        assert.falsy(lower:find("commit %x%x%x%x%x%x%x"), path)
      end
    end)

  it("keep the front page short, with the two commands first", function()
    local readme = docs["README.md"]
    local lines = select(2, readme:gsub("\n", ""))
    assert.is_true(lines <= 400, lines .. " lines")
    local demo, test = readme:find("make demo", 1, true),
      readme:find("make test", 1, true)
    assert.is_true(demo ~= nil and test ~= nil and demo < 1000)
  end)
end)
