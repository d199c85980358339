-- Every budget kind speaks one protocol (withdraw, allows, record,
-- deposit, tokens), in-process and shared through an ngx.shared dict
-- (here a fake one, spec/budget_dict.lua); what each kind's state does
-- when its dict key is missing or holds a foreign value.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

-- a clock the specs move by hand, and a draw they choose
local function world()
  local w = { t = 1000, draw = 0.5 }
  w.clock = function() return w.t end
  w.random = function() return w.draw end
  return w
end

-- each kind, built in-process (dict nil) or shared (dict given)
local KINDS = {
  { name = "token bucket", alt = { capacity = 7 },
    make = function(o, dict)
      o = o or {}
      o.shared = dict
      return budget(o)
    end },
  { name = "grpc", alt = { max_tokens = 7 }, make = function(o, dict)
      o = o or {}
      o.shared = dict
      return budget.grpc(o)
    end },
  { name = "earned", alt = { capacity = 7 }, make = function(o, dict, w)
      o = o or {}
      o.shared, o.clock = dict, (w or world()).clock
      return budget.earned(o)
    end },
  { name = "recommended", make = function(o, dict, w)
      return budget.recommended { shared = dict, key = o and o.key,
                                  clock = (w or world()).clock }
    end },
  { name = "ratio", alt = { percent = 7 }, make = function(o, dict, w)
      o = o or {}
      o.shared, o.clock = dict, (w or world()).clock
      return budget.ratio(o)
    end },
  { name = "adaptive", alt = { window = 7 }, make = function(o, dict, w)
      o = o or {}
      w = w or world()
      o.shared, o.clock, o.random = dict, w.clock, w.random
      return budget.adaptive(o)
    end },
}

local function finite(v)
  return type(v) == "number" and v == v and v >= 0 and v < math.huge
end

for _, kind in ipairs(KINDS) do
  for _, where in ipairs { "in-process", "shared" } do
    local function make(o, w)
      local dict = where == "shared" and new_dict() or nil
      return kind.make(o, dict, w), dict
    end

    describe(kind.name .. " (" .. where .. ")", function()
      it("has every method of the protocol", function()
        local b = make()
        for _, m in ipairs { "withdraw", "allows", "record", "deposit",
                             "tokens" } do
          assert.equal("function", type(b[m]), m)
        end
        assert.matches("^backoff%.budget", tostring(b))
        assert.is_string(budget.kind(b))
      end)

      it("allows() says what withdraw() will do and takes nothing",
         function()
        local b = make()
        for _ = 1, 30 do
          local before = b:tokens()
          local a = b:allows()
          assert.equal(before, b:tokens())
          -- adaptive: the same draw, at the same moment
          assert.equal(a, b:withdraw())
          b:record(false, 2)
        end
      end)

      it("a refused withdraw takes nothing; tokens() stays finite >= 0",
         function()
        local b = make()
        local refused = 0
        for i = 1, 200 do
          local before = b:tokens()
          assert.is_true(finite(before), tostring(before))
          if b:withdraw() then
            b:record(false, 2)
          else
            refused = refused + 1
            -- adaptive counts a refused retry as a request (SRE)
            if kind.name ~= "adaptive" then
              assert.equal(before, b:tokens())
            end
            b:record(i % 7 == 0, 1)
          end
        end
        assert.is_true(refused > 0, "a failing upstream is refused at last")
      end)

      it("a success on a fresh budget leaves it as it was", function()
        local b = make()
        local t = b:tokens()
        b:record(true, 1)
        b:record(true, 2, nil)
        assert.equal(t, b:tokens())
        assert.is_true(b:withdraw())
      end)

      it("deposit() gives back what withdraw() took", function()
        local b = make()
        assert.is_true(b:withdraw())
        local after = b:tokens()
        local r = b:deposit(kind.name == "token bucket" and b:cost()
                            or nil)
        assert.is_true(finite(r))
        assert.is_true(b:tokens() >= after)
      end)

      if where == "shared" then
        it("two objects on one dict and key share the state; another key "
           .. "or another configuration does not", function()
          local w = world()
          local dict = new_dict()
          local a = kind.make(nil, dict, w)
          local b = kind.make(nil, dict, w)
          local other = kind.make({ key = "other" }, dict, w)
          assert.equal(a:dict_key(), b:dict_key())
          assert.are_not.equal(a:dict_key(), other:dict_key())
          assert.truthy(a:dict_key():find("backoff:budget|", 1, true))
          -- drain a; b sees it, other does not
          for _ = 1, 2000 do
            if not a:withdraw() then break end
            a:record(false, 2)
          end
          if kind.name ~= "adaptive" then
            assert.is_false(b:allows())
          end
          assert.is_true(other:allows())
          if kind.alt then
            local alt = kind.make(kind.alt, dict, w)
            assert.are_not.equal(a:dict_key(), alt:dict_key())
            assert.is_true(alt:allows())
          end
        end)

        it("a missing key (never written, evicted) is the documented "
           .. "fresh state", function()
          local b, dict = make()
          local fresh = b:tokens()
          for _ = 1, 50 do
            if b:withdraw() then b:record(false, 2) end
          end
          for k in pairs(dict.data) do dict.data[k] = nil end   -- evicted
          assert.equal(fresh, b:tokens())
          assert.is_true(b:withdraw())
        end)

        it("a foreign value under its keys is read as missing: deleted, "
           .. "the fresh state, nothing NaN comes back", function()
          for _, v in ipairs { 0 / 0, 1 / 0, -1 / 0, 2 ^ 53, 1e300, 0.5,
                               "text", -2 ^ 60 } do
            local w = world()
            local b, dict = make(nil, w)
            local fresh, fresh_allows = b:tokens(), b:allows()
            b:record(true, 1)
            assert.is_true(b:withdraw())   -- writes its keys
            b:record(false, 2)
            local written = 0
            for k in pairs(dict.data) do
              dict.data[k] = v
              written = written + 1
            end
            assert.is_true(written > 0)
            local t = b:tokens()
            assert.is_true(finite(t), tostring(t))
            assert.equal(fresh, t)
            assert.equal(fresh_allows, b:allows())
            -- never a raise, whatever the value; what the calls met is
            -- gone
            for k in pairs(dict.data) do dict.data[k] = v end
            b:withdraw()
            b:record(true, 1)
            b:record(false, 2)
            b:deposit()
            b:tokens()
            for k, x in pairs(dict.data) do
              assert.is_false(x == v or x ~= x, "kept under " .. k)
            end
          end
        end)
      end
    end)
  end
end

describe("budget.kind", function()
  it("names the kind of a budget, nil for anything else", function()
    assert.equal("token_bucket", budget.kind(budget {}))
    assert.equal("token_bucket", budget.kind(budget { shared = new_dict() }))
    assert.equal("grpc", budget.kind(budget.grpc {}))
    assert.equal("earned", budget.kind(budget.recommended()))
    assert.equal("ratio", budget.kind(budget.ratio {}))
    assert.equal("adaptive", budget.kind(budget.adaptive {}))
    for _, v in ipairs { {}, "x", 1, io.stdout } do
      assert.is_nil(budget.kind(v))
    end
  end)

  it("keeps budget{} the token bucket, as before", function()
    local b = budget { capacity = 10, cost = 5, refund = 1 }
    assert.equal(10, b:capacity())
    assert.is_true(b:withdraw())
    assert.equal(5, b:tokens())
    assert.equal(budget.token_bucket { capacity = 10 }:capacity(), 10)
    assert.equal(require("backoff").budget, budget)
  end)
end)

describe("budget.earned's reserve window", function()
  it("counts requests and ended failures for span seconds", function()
    local w = world()
    local b = budget.earned { clock = w.clock, per_request = 0.5,
                              per_failure = 1, span = 4 }
    assert.equal(4, b:span())
    assert.equal(1, b:reserve())                  -- the floor: cost
    for _ = 1, 6 do b:record(true, 1) end         -- 6 x 0.5
    assert.equal(3, b:reserve())
    b:record(false, 1)
    b:record(false, 2)
    b:record(true, 3)                             -- ends 2 failures
    assert.equal(5.5, b:reserve())
    w.t = w.t + 3.5
    assert.equal(5.5, b:reserve())
    w.t = w.t + 0.5                               -- 4 slices of 1 s: gone
    assert.equal(1, b:reserve())
  end)

  it("span = 0: the reserve is the capacity, no clock is read", function()
    local b = budget.earned { span = 0, clock = function()
      error("read")
    end }
    assert.equal(8, b:reserve())
    for _ = 1, 8 do assert.is_true(b:withdraw()) end
    assert.is_false(b:withdraw())
    b:record(true, 1)
    assert.equal(6, b:tokens())
  end)

  it("shared: slices expire in the dict by themselves; an evicted or "
     .. "corrupt slice counts 0, and a write deletes a corrupt one",
     function()
    local w = world()
    local dict = new_dict()
    dict.now = w.clock
    local a = budget.recommended { shared = dict, clock = w.clock }
    local b = budget.recommended { shared = dict, clock = w.clock }
    for _ = 1, 50 do a:record(true, 1) end        -- 50 x 0.08
    assert.is_true(a:withdraw())                  -- flushes a's counts
    assert.equal(4, b:reserve())
    w.t = w.t + 30
    assert.equal(1, dict:count())                 -- the counter only
    assert.equal(1, b:reserve())
    for _ = 1, 50 do a:record(true, 1) end
    assert.is_true(a:withdraw())
    w.t = w.t + 1                                 -- b reads it afresh
    local slice
    for k in pairs(dict.data) do
      if k ~= a:dict_key() then slice = k end
    end
    for _, v in ipairs { 0 / 0, 1 / 0, -5, 0.5, 2 ^ 60, "x" } do
      dict.data[slice] = v
      w.t = w.t + 1                               -- not the cached sum
      local r = b:reserve()
      assert.is_true(r == 1, tostring(r))
    end
    dict.data[slice] = "x"
    w.t = w.t - 2                                 -- no time passed
    assert.equal(1, b:reserve())
    -- a's counts of this second meet a NaN: deleted, read as missing
    a:record(true, 1)
    for k in pairs(dict.data) do dict.data[k] = nil end
    local mine = a:dict_key() .. ":"
      .. require("backoff.budget.common").short(math.floor(w.t))
    dict.data[mine] = 0 / 0
    assert.is_true(a:withdraw())
    local x = dict.data[mine]
    assert.is_true(x == nil or x == x and x >= 0, tostring(x))
  end)
end)

describe("budget.ratio's window", function()
  it("expires requests and retries after ttl", function()
    local w = world()
    local b = budget.ratio { window = 10, percent = 50, min_per_second = 0,
                             clock = w.clock }
    for _ = 1, 10 do b:record(true, 1) end        -- 10 requests
    assert.equal(5, b:tokens())                   -- 50% of them
    for _ = 1, 5 do assert.is_true(b:withdraw()) end
    assert.is_false(b:withdraw())
    w.t = w.t + 5
    assert.is_false(b:withdraw())                 -- all still counted
    w.t = w.t + 6                                 -- both expired
    assert.equal(0, b:tokens())
    for _ = 1, 2 do b:record(false, 1) end        -- outcomes do not matter
    assert.equal(1, b:tokens())
    assert.is_true(b:withdraw())
  end)

  it("keeps a reserve of min_per_second x ttl retries", function()
    local w = world()
    local b = budget.ratio { window = 2, percent = 0, min_per_second = 3,
                             clock = w.clock }
    assert.equal(6, b:tokens())
    for _ = 1, 6 do assert.is_true(b:withdraw()) end
    assert.is_false(b:withdraw())
    b:record(true, 1)                             -- percent 0: no credit
    assert.is_false(b:withdraw())
    w.t = w.t + 2.5
    assert.equal(6, b:tokens())
  end)

  it("shared: slices expire in the dict by themselves", function()
    local w = world()
    local dict = new_dict()
    dict.now = w.clock
    local b = budget.ratio { window = 10, percent = 100, min_per_second = 0,
                             clock = w.clock, shared = dict }
    for _ = 1, 4 do b:record(true, 1) end
    assert.is_true(dict:count() > 0)
    assert.equal(4, b:tokens())
    w.t = w.t + 30
    assert.equal(0, dict:count())
    assert.equal(0, b:tokens())
  end)

  -- deposit(2^53) minted 3.5e10 retries in a budget meant to refuse
  -- every one: a deposit gives back what withdrawals took, no more
  it("gives back only what the window's withdrawals took", function()
    for _, shared in ipairs { false, true } do
      local w = world()
      local dict = shared and new_dict() or nil
      if dict then dict.now = w.clock end
      local none = budget.ratio { percent = 0, min_per_second = 0,
                                  clock = w.clock, shared = dict }
      assert.equal(0, none:deposit(2 ^ 53))
      assert.equal(0, none:deposit())
      assert.is_false(none:withdraw())
      local b = budget.ratio { window = 10, percent = 50, min_per_second = 0,
                               clock = w.clock, shared = dict,
                               key = dict and "b" or nil }
      for _ = 1, 4 do b:record(true, 1) end       -- 2 retries
      assert.is_true(b:withdraw())
      assert.equal(1, b:tokens())
      assert.equal(2, b:deposit(5))               -- gives back the 1 only
      assert.equal(2, b:deposit(5))
      assert.is_true(b:withdraw())
      assert.is_true(b:withdraw())
      assert.is_false(b:withdraw())
      assert.equal(1, b:deposit(1))
      w.t = w.t + 11                              -- all expired
      assert.equal(0, b:deposit(1))
      assert.equal(0, b:tokens())
    end
  end)

  it("treats a clock that goes back as no time passed", function()
    local w = world()
    local b = budget.ratio { window = 10, percent = 100, min_per_second = 0,
                             clock = w.clock }
    b:record(true, 1)
    w.t = w.t - 100
    assert.equal(1, b:tokens())
    w.t = w.t + 100 + 11
    assert.equal(0, b:tokens())
  end)
end)

-- A full lua_shared_dict makes room on incr by evicting other keys, and
-- says so in incr's third result (`forcible`).  Every incr of the
-- budgets goes through store.incr, which logs it at WARN (ngx.log), once
-- per key and minute: a budget drained to 0 that comes back full after
-- an eviction is no longer silent.
describe("a shared budget in a full dict", function()
  local saved, logs, now
  before_each(function()
    saved = rawget(_G, "ngx")
    logs, now = {}, 5000
    rawset(_G, "ngx", { WARN = 5, now = function() return now end,
      log = function(level, ...)
        logs[#logs + 1] = { level = level, text = table.concat { ... } }
      end })
  end)
  after_each(function() rawset(_G, "ngx", saved) end)

  -- the fake dict, whose incr reports evictions while d.full is set
  local function full_dict()
    local d = new_dict()
    local incr = d.incr
    function d.incr(self, ...)
      local v, err = incr(self, ...)
      return v, err, v ~= nil and self.full or false
    end
    d.full = true
    return d
  end

  -- each kind's calls that write: a request failed, then a retry paid,
  -- then succeeded (the windowed kinds write a slice per call)
  local function drive(b)
    b:record(false, 1)
    b:withdraw()
    b:record(true, 2)
    b:deposit(1)
  end

  -- the keys named in the log lines since index i
  local function logged_keys(i)
    local keys = {}
    for j = i or 1, #logs do
      local l = logs[j]
      assert.equal(5, l.level)
      -- the words that matter, whatever else the line says
      assert.matches("^backoff: the lua_shared_dict .*is full", l.text)
      assert.matches("its own", l.text, 1, true)
      local k = l.text:match(" key '(.-)' evicted other keys")
      assert.is_string(k, l.text)
      assert.is_nil(keys[k], "key logged twice: " .. k)
      keys[k] = true
    end
    return keys
  end

  for _, kind in ipairs(KINDS) do
    it(kind.name .. ": warns once per dict and minute, and still counts",
       function()
      local w = world()
      local d = full_dict()
      local b = kind.make({}, d, w)
      drive(b)
      -- one line for the dict, naming a key that was written
      assert.equal(1, #logs)
      local keys = logged_keys()
      for k in pairs(keys) do
        assert.is_not_nil(d.data[k], "logged a key never written: " .. k)
      end
      -- within the minute (the clocks move, the slices stay): no repeat
      now, w.t = now + 59, w.t + 0.001
      drive(b)
      assert.equal(1, #logs)
      -- a minute later: one line again
      now = now + 1
      drive(b)
      assert.equal(2, #logs)
      logged_keys(2)
      -- the budget still works: its state is where the dict has it
      local t = b:tokens()
      assert.is_true(t >= 0 and t < math.huge)
    end)

    it(kind.name .. ": says nothing while the dict has room", function()
      local d = full_dict()
      d.full = false
      drive(kind.make({}, d))
      assert.equal(0, #logs)
    end)
  end

  it("logs nothing for a budget of one Lua state", function()
    for _, kind in ipairs(KINDS) do
      drive(kind.make({}, nil))
    end
    assert.equal(0, #logs)
  end)
end)
