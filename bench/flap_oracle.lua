-- What a budget could at best get out of a flapping upstream (5 s down,
-- 5 s up), the policy of bench/outage.lua (exponential from 0.1 s to
-- 20 s, full jitter, 10 attempts): for requests arriving uniformly in a
-- down spell, the retries each needs to reach an up spell; then, spent
-- only on the requests that need the fewest (an oracle no budget is),
-- the amplification it takes for a given success (half the requests
-- arrive in up spells and succeed at once).
--   luajit bench/flap_oracle.lua [N]
local here = arg[0]:match("^(.-)[^/]*$")
local model = dofile(here .. "outage_model.lua")
local random = model.generator(1)

local DOWN, CYCLE = 5, 10
local N = tonumber(arg[1]) or 200000
local ks = {}
for n = 1, N do
  local t = random() * DOWN            -- arrival in the down spell
  local k = 0
  while true do
    k = k + 1
    if k > 9 then k = math.huge break end  -- 10 attempts: 9 retries
    t = t + random() * math.min(20, 0.1 * 2 ^ (k - 1))
    if t % CYCLE >= DOWN then break end
  end
  ks[n] = k
end
table.sort(ks)
for _, target in ipairs { 0.60, 0.65, 0.70 } do
  local need = math.floor((target - 0.5) * 2 * N)  -- of 2N requests
  local sum = 0
  for i = 1, need do sum = sum + ks[i] end
  print(("success %.0f%%: amplification at least %.3f"):format(
    100 * target, 1 + sum / (2 * N)))
end
