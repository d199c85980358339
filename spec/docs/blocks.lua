-- The docs spec's reading half (no I/O but the file read): the fenced
-- code blocks of a Markdown file, what each one is by its info string,
-- the program a ```lua block runs, and the comparison with an
-- ```output block.  spec/docs/run.lua runs what this finds; the
-- conventions are in CONTRIBUTING.md ("Docs that run").
local B = {}

-- the tags each language takes after its name in the info string
local TAGS = {
  lua = { fragment = true, nginx = true, pending = true },
  nginx = { fragment = true, ["http-block"] = true, pending = true },
  sh = { fragment = true, pending = true },
  console = { fragment = true, pending = true, checkout = true,
              dry = true },
  output = {},
  text = {},
}

-- Every fenced block of `text` (the file `file`), in order:
-- { file, line (of the opening fence), last, lang, tags, info, lines }.
-- A block indented under a list item loses that indentation.
function B.extract(file, text)
  local blocks, cur, n = {}, nil, 0
  for line in (text:gsub("\n?$", "\n")):gmatch("(.-)\n") do
    n = n + 1
    local indent, fence, info = line:match("^(%s*)(```+)%s*(.-)%s*$")
    if cur then
      if fence and #fence >= #cur.fence and info == "" then
        cur.last = n
        blocks[#blocks + 1] = cur
        cur = nil
      else
        if line:sub(1, #cur.indent) == cur.indent then
          line = line:sub(#cur.indent + 1)
        end
        cur.lines[#cur.lines + 1] = line
      end
    elseif fence then
      local words = {}
      for w in info:gmatch("%S+") do words[#words + 1] = w end
      local tags = {}
      for i = 2, #words do tags[words[i]] = true end
      cur = { file = file, line = n, info = info, lang = words[1] or "",
              tags = tags, fence = fence, indent = indent, lines = {} }
    end
  end
  if cur then
    cur.unclosed = true
    blocks[#blocks + 1] = cur
  end
  return blocks
end

function B.where(b) return b.file .. ":" .. b.line end

-- the module name a ```lua block declares on its first line
-- (`-- file: app.lua`), or nil
function B.file_name(b)
  return b.lang == "lua" and (b.lines[1] or ""):match(
    "^%-%-%s*file:%s*([%w_%-]+%.lua)")
end

-- a ```sh block whose every line is a curl command, a comment or blank
local function is_requests(b)
  local any = false
  for _, line in ipairs(b.lines) do
    if line:match("^%s*curl%s") then
      any = true
    elseif not (line:match("^%s*$") or line:match("^%s*#")) then
      return false
    end
  end
  return any
end

local function bad(b, why)
  return { kind = "bad", block = b, why = why, where = B.where(b) }
end

-- what is wrong with a block's info string, or nil
local function info_problem(b)
  if b.unclosed then return "the fence is never closed" end
  local tags = TAGS[b.lang]
  if b.lang == "" then
    return "no language: fence it ```lua, ```nginx, ```sh, ```console, "
      .. "```output or ```text (add `fragment` to a block that cannot run "
      .. "as it is)"
  end
  if not tags then
    return "unknown language '" .. b.lang .. "' (lua, nginx, sh, console, "
      .. "output, text)"
  end
  for tag in pairs(b.tags) do
    if not tags[tag] then
      return "unknown tag '" .. tag .. "' for ```" .. b.lang
    end
  end
  if b.tags.fragment and b.tags.pending then
    return "a fragment does not run: it cannot be pending"
  end
  if b.tags.checkout and b.tags.dry then
    return "a ```console block is run from the checkout or checked dry, "
      .. "not both"
  end
end

-- The units to run, in order: each block alone, or an nginx example
-- (its config, the `-- file:` Lua blocks and the curl requests after
-- it).  unit.kind: "lua", "lua-nginx", "console", "nginx", "fragment",
-- "text" or "bad" (with `why`).
function B.classify(blocks)
  local units, i = {}, 1
  local function output_at(k)
    local b = blocks[k]
    if b and b.lang == "output" and not info_problem(b) then return b end
  end
  while i <= #blocks do
    local b = blocks[i]
    local problem = info_problem(b)
    local u = { block = b, where = B.where(b), pending = b.tags.pending }
    i = i + 1
    if problem then
      u = bad(b, problem)
    elseif b.tags.fragment then
      u.kind = "fragment"
    elseif b.lang == "text" then
      u.kind = "text"
    elseif b.lang == "output" then
      u = bad(b, "an ```output block must follow a block that runs (a "
        .. "```lua block, or an nginx example's ```sh curl requests)")
    elseif b.lang == "sh" then
      u = bad(b, "a ```sh block runs only as the curl requests right "
        .. "after an ```nginx example: mark it ```sh fragment")
    elseif b.lang == "console" then
      u.kind = "console"
    elseif b.lang == "lua" and B.file_name(b) then
      u = bad(b, "a `-- file:` block belongs right after an ```nginx "
        .. "example (or mark it ```lua fragment)")
    elseif b.lang == "lua" then
      u.kind = b.tags.nginx and "lua-nginx" or "lua"
      u.output = output_at(i)
      if u.output then i = i + 1 end
    else -- nginx: the config, then its files and requests
      u.kind, u.files, u.requests = "nginx", {}, {}
      local inside = {} -- fragments between its blocks (how to start it)
      while blocks[i] and not info_problem(blocks[i]) do
        local nb = blocks[i]
        if nb.tags.fragment or nb.lang == "console" and nb.tags.dry then
          -- how to install and start it: not run, or checked dry
          inside[#inside + 1] = { kind = nb.tags.fragment and "fragment"
            or "console", block = nb, where = B.where(nb) }
        elseif B.file_name(nb) then
          u.files[#u.files + 1] = nb
        elseif nb.lang == "sh" and is_requests(nb) then
          local out = output_at(i + 1)
          u.requests[#u.requests + 1] = { block = nb, output = out }
          if out then i = i + 1 end
        else
          break
        end
        u.pending = u.pending or nb.tags.pending
        i = i + 1
      end
      -- trailing fragments are not the example's
      while inside[1] and inside[#inside].block.line > (u.requests[1]
          and u.requests[#u.requests].block.line or
          u.files[1] and u.files[#u.files].line or b.line) do
        i = i - 1
        inside[#inside] = nil
      end
      units[#units + 1] = u
      for _, f in ipairs(inside) do units[#units + 1] = f end
      u = nil
    end
    units[#units + 1] = u
  end
  return units
end

------------------------------------------------------------------------
-- ```lua programs: a line `EXPR --> VALUES` checks EXPR's values

-- one line, so that the block's line numbers stay as they are
local EXPECT = "local function __doc_expect(where, want, ...) "
  .. "local got = {} for i = 1, select('#', ...) do "
  .. "local v = select(i, ...) if type(v) == 'string' then "
  .. "v = '\"' .. v .. '\"' elseif type(v) == 'number' then "
  .. "v = string.format('%.14g', v) else v = tostring(v) end "
  .. "got[i] = v end got = table.concat(got, ', ') "
  .. "if got ~= want then error(where .. ': got ' .. got .. "
  .. "', the doc says ' .. want, 2) end end "

-- The program a ```lua block runs: the block as it is, except that a
-- line `EXPR --> VALUES` raises unless EXPR's values, written as the
-- doc writes them (strings in double quotes, numbers as %.14g, nil,
-- true, false), are VALUES.
function B.program(b)
  local out, any = {}, false
  for k, line in ipairs(b.lines) do
    local code, want = line:match("^%s*(.-%S)%s+%-%->%s*(.-)%s*$")
    local where = b.file .. ":" .. (b.line + k)
    if code and not code:match("^%-%-") then
      any = true
      line = ("__doc_expect(%q, %q, %s)"):format(where, want, code)
    elseif line:match("^%s*%-%->") then -- it would check nothing
      line = ("error(%q)"):format(where .. ": a `-->` needs its "
        .. "expression on the same line")
    end
    out[k] = line
  end
  return (any and EXPECT or "") .. table.concat(out, "\n") .. "\n"
end

------------------------------------------------------------------------
-- ```output: exact, but for `...`

function B.lines(s)
  local t = {}
  for line in (s:gsub("\n?$", "\n")):gmatch("(.-)\n") do t[#t + 1] = line end
  if s == "" then t = {} end
  return t
end

-- `...` inside a line stands for any text within that line
local function line_matches(want, got)
  if not want:find("...", 1, true) then return want == got end
  local parts = {}
  for piece in (want .. "..."):gmatch("(.-)%.%.%.") do
    parts[#parts + 1] = (piece:gsub("%p", "%%%0"))
  end
  return got:match("^" .. table.concat(parts, ".-") .. "$") ~= nil
end

-- want, got: arrays of lines; a line that is only `...` stands for any
-- number of lines (none included)
function B.matches(want, got, i, j)
  i, j = i or 1, j or 1
  while want[i] do
    if want[i] == "..." then
      for k = j, #got + 1 do
        if B.matches(want, got, i + 1, k) then return true end
      end
      return false
    end
    if got[j] == nil or not line_matches(want[i], got[j]) then
      return false
    end
    i, j = i + 1, j + 1
  end
  return got[j] == nil
end

return B
