-- A fake ngx.shared dict for the budget specs (33 and up), with
-- lua-resty-core's semantics for what the budgets use:
--   incr(key, value, init, init_ttl): a missing key without init is
--     nil, "not found"; with init it becomes init + value (init_ttl, when
--     given, makes it expire); a value that is not a number is nil,
--     "not a number"; returns the new value
--   get(key), set(key, value, ttl), add(key, value, ttl): false,
--     "exists" for a live key; delete(key)
-- Extras for the specs:
--   d.data        the raw values (to read, or to plant foreign ones)
--   d.on_incr     called after every incr (a coroutine may yield there,
--                 so that specs can interleave the calls of "workers")
--   d.fail        when set, every call returns nil, d.fail
--   d.now         when set, a function giving the time of expiries
--   d.incrs, d.gets  call counts
--   local new_dict = dofile("spec/budget_dict.lua")
return function()
  local d = { data = {}, expires = {}, incrs = 0, gets = 0 }

  local function live(self, key)
    local e = self.expires[key]
    if e and self.now and self.now() >= e then
      self.data[key], self.expires[key] = nil, nil
    end
    return self.data[key]
  end

  function d.incr(self, key, value, init, init_ttl)
    assert(type(value) == "number", "bad value")
    if self.fail then return nil, self.fail end
    self.incrs = self.incrs + 1
    local v = live(self, key)
    if v == nil then
      if init == nil then return nil, "not found" end
      v = init
      if init_ttl and init_ttl > 0 and self.now then
        self.expires[key] = self.now() + init_ttl
      end
    elseif type(v) ~= "number" then
      return nil, "not a number"
    end
    v = v + value
    self.data[key] = v
    if self.on_incr then self.on_incr(key, v) end
    return v
  end

  function d.get(self, key)
    if self.fail then return nil, self.fail end
    self.gets = self.gets + 1
    return live(self, key)
  end

  -- ttl > 0 (with d.now): the key expires then
  local function expiry(self, key, ttl)
    if ttl and ttl > 0 and self.now then
      self.expires[key] = self.now() + ttl
    else
      self.expires[key] = nil
    end
  end

  function d.set(self, key, value, ttl)
    self.data[key] = value
    expiry(self, key, ttl)
    return true
  end

  function d.add(self, key, value, ttl)
    if live(self, key) ~= nil then return false, "exists" end
    self.data[key] = value
    expiry(self, key, ttl)
    return true
  end

  function d.delete(self, key)
    self.data[key], self.expires[key] = nil, nil
  end

  -- the number of keys holding a value
  function d.count(self)
    local n = 0
    for k in pairs(self.data) do
      if live(self, k) ~= nil then n = n + 1 end
    end
    return n
  end

  return d
end
