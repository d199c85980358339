-- backoff.breaker.metrics: a breaker's families in backoff.metrics'
-- Prometheus text (internal), written after the retry counters:
--   backoff_breaker_transitions_total{name,to}  counter: changes, by the
--                                                state entered
--   backoff_breaker_refusals_total{name}        counter: allow() false
--   backoff_breaker_state{name}                 gauge: 0 closed, 1 open,
--                                                2 half-open
-- The counters are a recorder's (its dict, or this process), under keys
-- "backoff\tbreaker_transitions\t<name>\t<to>" and
-- "backoff\tbreaker_refusals\t<name>", so metrics.reset clears them; the
-- gauge is read, when the text is written, from each breaker given a
-- recorder of that dict (from the breaker's own dict: whichever worker
-- answers /metrics, the same answer).  name: the recorder's.

local metrics = require "backoff.metrics"

local getmetatable, ipairs, pairs, pcall, setmetatable =
      getmetatable, ipairs, pairs, pcall, setmetatable

local X = metrics._ext
local PREFIX, escape = X.PREFIX, X.escape

local B = {}

local STATE = { closed = 0, open = 1, half_open = 2 }
local HELP = {
  transitions = "Circuit breaker state changes, by the state entered.",
  refusals = "Attempts a circuit breaker refused.",
}
-- breaker -> its recorder (weak: a breaker dropped leaves the text)
local watched = setmetatable({}, { __mode = "k" })

--- is v a backoff.metrics recorder?
function B.is_recorder(v) return getmetatable(v) == X.recorder_mt end

--- B.watch(m, br): br's state joins the text of m's dict
function B.watch(m, br) watched[br] = m end

-- the key of a counter of recorder m (to: the state entered)
local function key_of(m, counter, to)
  local k = PREFIX .. "breaker_" .. counter .. "\t" .. m.name
  if to then k = k .. "\t" .. to end
  return k
end

--- B.transition(m, to), B.refusal(m): one more
function B.transition(m, to) X.add(m, key_of(m, "transitions", to)) end
function B.refusal(m) X.add(m, key_of(m, "refusals")) end

local family = X.family

local KEY = "^" .. PREFIX .. "breaker_(%l+)\t([^\t]+)\t?(.*)$"
local STATES = { closed = true, open = true, half_open = true }

-- the families of dict (nil: this process's counts)
local function write(out, dict)
  local rows = { transitions = {}, refusals = {} }
  for k, v in pairs(X.snapshot(dict)) do
    local counter, name, to = k:match(KEY)
    local labels = name and 'name="' .. escape(name) .. '"'
    if counter == "transitions" and STATES[to] then
      rows.transitions[labels .. ',to="' .. to .. '"'] = v
    elseif counter == "refusals" and to == "" then
      rows.refusals[labels] = v
    end
  end
  for _, c in ipairs { "transitions", "refusals" } do
    family(out, "backoff_breaker_" .. c .. "_total", "counter", HELP[c],
           rows[c])
  end
  local states = {}
  for br, m in pairs(watched) do
    if m.dict == dict then
      local ok, s = pcall(br.state, br)
      if ok and STATE[s] then
        states['name="' .. escape(m.name) .. '"'] = STATE[s]
      end
    end
  end
  family(out, "backoff_breaker_state", "gauge", "Circuit breaker state: "
    .. "0 closed, 1 open, 2 half-open.", states)
end

local writers = metrics._writers
writers[#writers + 1] = write

return B
