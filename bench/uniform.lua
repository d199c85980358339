-- uniform(seed) -> a draw in [0, 1): Park-Miller, the same stream on
-- every Lua (bench/breaker_model.lua, bench/fleet_model.lua; run from
-- the top of the tree: dofile("bench/uniform.lua"))
return function(seed)
  local x = seed % 2147483646 + 1
  return function()
    x = x * 48271 % 2147483647
    return (x - 1) / 2147483646
  end
end
