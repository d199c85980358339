-- backoff.engine.hold: an attempt the breaker refuses is held, not
-- dropped (internal; the engine's, for the doors that wait).
--
-- A breaker that says `hold()` > 0 (the recommended breaker: 4 s) does
-- not end a run it refuses: the run waits its policy's next delay, as
-- after a failure that cost nothing (no request was sent, nothing is
-- recorded), and asks the breaker again, for at most hold() seconds from
-- the run's start and within the policy's own limits (max_attempts, the
-- deadline: each ask is an attempt of the policy's).  So a request that
-- meets a breaker opened by a short outage (a flapping upstream, a
-- brownout's worst seconds) is made once the breaker lets it through,
-- as a budget's retry would have been; against a dead upstream it still
-- ends after at most hold() seconds, having sent nothing.  Only a
-- probe's worth of requests reaches the upstream while it is open, so
-- the load a breaker cuts is unchanged; and since a run is held for at
-- most hold() seconds, at most that many seconds of requests are
-- waiting when the upstream returns (no herd).  A door that cannot wait
-- (the balancer, the hedge's copies) ends the run at once, as before.

local util = require "backoff.util"

local type = type
local huge = math.huge
local now_of = util.now              -- an object's clock, read once

local H = {}

--- hold.limit(br) -> the seconds br holds a run it refuses, or nil:
-- its hold() method (a breaker without one holds nothing)
function H.limit(br)
  local f = br.hold
  if type(f) ~= "function" then return nil end
  local s = f(br)
  if type(s) == "number" and s > 0 and s < huge then return s end
  return nil
end

--- hold.wait(br, b, start, sleep) -> true, ticket | false: the run
-- (its object b, started at `start` on b's clock) was refused: wait
-- the policy's delays with sleep and ask again while the hold lasts.
-- False when there is no sleep (a door that cannot wait, a phase that
-- cannot), the breaker holds nothing, the policy gives up, or the next
-- ask would come after the hold: the run ends with "circuit_open".
function H.wait(br, b, start, sleep)
  local limit = sleep and H.limit(br)
  if not limit then return false end
  while true do
    local now = now_of(b)
    local delay = b:failure(now)
    -- (a delay of 0 would ask again at once: a held run always waits)
    if delay == nil or delay <= 0 or now + delay - start > limit then
      return false
    end
    sleep(delay)
    local ok, ticket = br:allow()
    if ok then return true, ticket end
  end
end

return H
