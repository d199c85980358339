-- backoff.fleet.view: the fleet's word on a breaker, as the host's
-- dict holds it (internal; the one read a request makes of the fleet).
--
-- The fleet's timer (backoff.fleet) writes, for each breaker it syncs,
-- one key in the host's lua_shared_dict: the fleet's key .. "|F" .. the
-- breaker's key,
--   a number u > 0   the fleet is open: refuse until u (the host's clock)
--   a number -u < 0  the fleet is open and this host is its prober: let
--                    the breaker's own half-open admit its probes
--   missing          the fleet is closed, or not known (Redis down, the
--                    timer stopped): the host's own state alone decides
-- written with an expiry of `hold` seconds (a few sync intervals), so a
-- timer that stops syncing leaves each host on its own state by itself.
-- A value the timer cannot have written (not a number, a time further
-- than `hold` away) is foreign: logged, deleted, read as missing.
-- Nothing here talks to the network: one dict get per call.

local store = require "backoff.store"

local type = type

local V = {}

--- view.key(fleet_key, name) -> the dict key of breaker `name`'s view
function V.key(fleet_key, name) return fleet_key .. "|F" .. name end

--- view.read(dict, key, now, hold) -> "open" | "probe" | nil: the
-- fleet's word, checked (hold: the longest a value may reach ahead;
-- now: a time, or a function giving it, called only when the key holds
-- a value: a closed fleet costs one dict get)
function V.read(dict, key, now, hold)
  local v = dict:get(key)
  if v == nil then return nil end
  if type(now) == "function" then now = now() end
  if type(v) ~= "number" or v ~= v then
    store.foreign(dict, key, v, "backoff.fleet", "a time")
    return nil
  end
  local u = v < 0 and -v or v
  if u > now + hold + 1 then
    store.foreign(dict, key, v, "backoff.fleet", "a time within "
                  .. hold .. " s")
    return nil
  end
  if u <= now then return nil end
  return v < 0 and "probe" or "open"
end

--- view.refuses(dict, key, now, hold) -> true when the fleet is open
-- and this host is not its prober: the one check a breaker needs
function V.refuses(dict, key, now, hold)
  return V.read(dict, key, now, hold) == "open"
end

return V
