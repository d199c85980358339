-- A fake ngx.shared dict for the breaker specs (44 and up), with
-- lua-resty-core's semantics for the calls a breaker makes:
--   get(key)                        the value, nil when missing/expired
--   set(key, value, exptime)        true (exptime > 0: expires then)
--   add(key, value, exptime)        true | false, "exists"
--   incr(key, n, init, init_ttl)    the new value | nil, "not found"
--                                   (no init) | nil, "not a number"
--   delete(key)                     true
-- Extras for the specs:
--   d.data       the raw values (to read, or to plant foreign ones)
--   d.now        a function giving the time of expiries (default 0)
--   d.after      called after every call as after(op, key): a
--                coroutine may yield there, so that a spec chooses the
--                order of the calls of two "workers"
--   d.ops        counts per call: d.ops.get, d.ops.set, ...
--   d.fail       when set, set/add/incr answer nil, d.fail
--   local new_dict = dofile("spec/breaker_dict.lua")
return function(now)
  local d = { data = {}, expires = {}, now = now or function() return 0 end,
              ops = { get = 0, set = 0, add = 0, incr = 0, delete = 0 } }

  local function live(self, key)
    local e = self.expires[key]
    if e and self.now() >= e then
      self.data[key], self.expires[key] = nil, nil
    end
    return self.data[key]
  end

  local function expiry(self, key, ttl)
    if ttl and ttl > 0 then
      self.expires[key] = self.now() + ttl
    else
      self.expires[key] = nil
    end
  end

  local function done(self, op, key, ...)
    self.ops[op] = self.ops[op] + 1
    if self.after then self.after(op, key) end
    return ...
  end

  function d.get(self, key)
    return done(self, "get", key, live(self, key))
  end

  function d.set(self, key, value, ttl)
    if self.fail then return done(self, "set", key, nil, self.fail) end
    self.data[key] = value
    expiry(self, key, ttl)
    return done(self, "set", key, true)
  end

  function d.add(self, key, value, ttl)
    if self.fail then return done(self, "add", key, nil, self.fail) end
    if live(self, key) ~= nil then
      return done(self, "add", key, false, "exists")
    end
    self.data[key] = value
    expiry(self, key, ttl)
    return done(self, "add", key, true)
  end

  function d.incr(self, key, n, init, ttl)
    assert(type(n) == "number", "bad value")
    if self.fail then return done(self, "incr", key, nil, self.fail) end
    local v = live(self, key)
    if v == nil then
      if init == nil then return done(self, "incr", key, nil, "not found") end
      v = init
      expiry(self, key, ttl)
    elseif type(v) ~= "number" then
      return done(self, "incr", key, nil, "not a number")
    end
    v = v + n
    self.data[key] = v
    return done(self, "incr", key, v)
  end

  function d.delete(self, key)
    self.data[key], self.expires[key] = nil, nil
    return done(self, "delete", key, true)
  end

  -- every call made so far, summed
  function d.total(self)
    local n = 0
    for _, c in pairs(self.ops) do n = n + c end
    return n
  end

  return d
end
