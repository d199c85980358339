-- The charts of bench/outage.lua: for one kind of event, the attempts
-- the server receives per second over time, one chart per event length,
-- the event shaded, the capacity dashed (params: the kind's own).
--   draw(path, kind, results, settings, params)
local COLORS = { none = "#777777", retries = "#d62728", token = "#1f77b4",
                 rec = "#2ca02c", rec4 = "#98df8a" }
local DASH = { none = "3,3", rec4 = "6,2" }
local W, H, M = 420, 280, 50

return function(path, kind, results, settings, params)
  local shown = {}
  for _, s in ipairs(settings) do
    if COLORS[s.id] and results[1][s.id] then shown[#shown + 1] = s end
  end
  if #shown == 0 then return end
  local n = #kind.events
  local out = { ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" '
    .. 'height="%d" font-family="sans-serif" font-size="11">')
    :format(n * (W + 20) + 20, H + 70) }
  local function add(fmt, ...) out[#out + 1] = fmt:format(...) end
  add('<text x="10" y="14" font-weight="bold">%s: server requests per '
      .. 'second vs time (s)</text>', kind.title)
  local top = 0
  for e in ipairs(kind.events) do
    for _, s in ipairs(shown) do
      local r = results[e][s.id]
      for b = 1, r.bins do top = math.max(top, r.received[b] or 0) end
    end
  end
  top = 2000 * math.ceil(top / 2000)
  for e, ev in ipairs(kind.events) do
    local ox = 10 + (e - 1) * (W + 20)
    local r0 = results[e][shown[1].id]
    local x_end = r0.bins
    local function x(t) return ox + M + t / x_end * (W - M - 10) end
    local function y(v) return 30 + (H - 50) * (1 - v / top) end
    add('<rect x="%.1f" y="30" width="%.1f" height="%d" fill="#eeeeee"/>',
      x(r0.start), x(r0.stop) - x(r0.start), H - 50)
    add('<text x="%.1f" y="44" text-anchor="middle">%d s</text>',
      x((r0.start + r0.stop) / 2), ev.len)
    add('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>',
      ox + M, H - 20, ox + W - 10, H - 20)
    add('<line x1="%d" y1="30" x2="%d" y2="%d" stroke="black"/>',
      ox + M, ox + M, H - 20)
    for k = 0, 4 do
      add('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>',
        ox + M - 4, y(top * k / 4) + 4, top * k / 4)
    end
    local step = x_end > 200 and 100 or 20
    for t = 0, x_end, step do
      add('<text x="%.1f" y="%d" text-anchor="middle">%d</text>', x(t),
        H - 6, t)
    end
    add('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" '
      .. 'stroke-dasharray="4,3"/>', ox + M, y(params.capacity),
      ox + W - 10, y(params.capacity))
    for i = #shown, 1, -1 do
      local s = shown[i]
      local r, pts = results[e][s.id], {}
      for b = 1, math.min(r.bins, math.floor(x_end)) do
        pts[#pts + 1] = ("%.1f,%.1f"):format(x(b - 0.5),
          y(r.received[b] or 0))
      end
      add('<polyline fill="none" stroke="%s" stroke-width="1.5" %s'
        .. 'points="%s"/>', COLORS[s.id], DASH[s.id]
        and ('stroke-dasharray="' .. DASH[s.id] .. '" ') or "",
        table.concat(pts, " "))
    end
  end
  for i, s in ipairs(shown) do
    local lx = 20 + (i - 1) * 200
    add('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
      .. '<text x="%d" y="%d">%s</text>', lx, H + 30, COLORS[s.id],
      lx + 16, H + 40, s.name)
  end
  out[#out + 1] = "</svg>"
  local f = assert(io.open(path, "w"))
  f:write(table.concat(out, "\n"), "\n")
  f:close()
end
