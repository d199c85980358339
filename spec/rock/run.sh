#!/bin/sh
# The LuaRocks build path, as a user meets it: `luarocks make` for Lua
# 5.1, 5.4, 5.3 and 5.2 into one private tree, from a copy of the
# checkout (the files `git archive` would give), then the specs against
# the installed rock only, run from a directory with no lua/, build/ or
# .busted.  Prints TAP.
#   sh spec/rock/run.sh ROOT WORKDIR
root=$1 work=$2
[ -n "$root" ] && [ -n "$work" ] || { echo "usage: run.sh ROOT WORKDIR" >&2; exit 2; }
case $work in /*) ;; *) work=$root/$work ;; esac
src=$work/src run=$work/run tree=$work/tree
failed=0

ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failed=1; }
# show a log as TAP comments
show() { sed 's/^/# /' "$1"; }

limd() {  # the README's LIMD example, through one installed wrapper
  "$1" -a LIMD --initial-delay 2 --min-delay 1 --delay-increment-on-failure 4 \
    --delay-multiple-on-success 0.2 0 0 0 1 1 1 0 0 0 2>&1 | tr '\n' ' '
}
LIMD="2 6 10 2 1 1 5 9 13 "

rm -rf "$work" && mkdir -p "$src" "$run" || exit 1
(cd "$root" && cp -r Makefile .ci csrc lua bin rockspec "$src/") || exit 1
cp -r "$root/spec" "$root/doc" "$root/README.md" "$run/" || exit 1

# 1. the rockspecs
for f in "$src"/rockspec/*.rockspec; do
  if luarocks lint "$f" >"$work/lint.log" 2>&1; then
    ok "luarocks lint $(basename "$f")"
  else not_ok "luarocks lint $(basename "$f")"; show "$work/lint.log"; fi
done

# 2. luarocks make for 5.1; nothing left where a Lua could load it
(cd "$src" && find . -path ./build -prune -o -type f -print | sort) >"$work/before"
if (cd "$src" && luarocks --lua-version 5.1 make --tree "$tree") >"$work/make51.log" 2>&1; then
  ok "luarocks --lua-version 5.1 make into a private tree"
else not_ok "luarocks --lua-version 5.1 make"; show "$work/make51.log"; fi
(cd "$src" && find . -path ./build -prune -o -type f -print | sort) >"$work/after"
if cmp -s "$work/before" "$work/after" && [ ! -e "$src/backoff" ]; then
  ok "luarocks make left the checkout as it was (its build is under build/rock/)"
else
  not_ok "luarocks make left files in the checkout"
  diff "$work/before" "$work/after" | sed 's/^/# /'
fi
missing=
for m in $(cd "$src/lua" && find . -name '*.lua' | sed 's|^\./||'); do
  [ -f "$tree/share/lua/5.1/$m" ] || missing="$missing $m"
done
[ -f "$tree/lib/lua/5.1/backoff/core.so" ] || missing="$missing backoff/core.so"
[ -x "$tree/bin/backoff-delays-5.1" ] || missing="$missing bin/backoff-delays-5.1"
[ -x "$tree/bin/backoff-delays" ] || missing="$missing bin/backoff-delays"
if [ -z "$missing" ]; then
  ok "the rock installed backoff/core.so, every module of lua/, bin/backoff-delays-5.1 and bin/backoff-delays"
else not_ok "the rock did not install:$missing"; fi
exports=$(nm -D --defined-only "$tree/lib/lua/5.1/backoff/core.so" 2>&1 |
  awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sort | tr '\n' ' ')
if [ "$exports" = "lbackoff_ffi_step lbackoff_ffi_token luaopen_backoff_core " ]; then
  ok "the rock's core.so exports only luaopen_backoff_core and the FFI entry points"
else not_ok "the rock's core.so exports: $exports"; fi
out=$(limd "$tree/bin/backoff-delays-5.1")
if [ "$out" = "$LIMD" ]; then ok "the installed backoff-delays-5.1 prints the LIMD example"
else not_ok "backoff-delays-5.1 printed: $out"; fi
# the documented name, as doc/cli.md runs it
out=$(limd "$tree/bin/backoff-delays")
if [ "$out" = "$LIMD" ]; then ok "the installed backoff-delays (the documented name) prints the LIMD example"
else not_ok "backoff-delays printed: $out"; fi
# no outcome: the usage on stderr, nothing on stdout, a non-zero status
"$tree/bin/backoff-delays" -a exponential --initial-delay 1 \
  >"$work/none.out" 2>"$work/none.err"
status=$?
if [ "$status" -eq 2 ] && [ ! -s "$work/none.out" ] &&
   grep -q '^usage: backoff-delays' "$work/none.err"; then
  ok "the installed backoff-delays with no outcome prints the usage on stderr and exits 2"
else not_ok "backoff-delays with no outcome exited $status"; show "$work/none.out"; show "$work/none.err"; fi

# the version the module reports, and the versioned rockspec beside scm
version=$(cd "$run" && eval "$(luarocks --lua-version 5.1 path --tree "$tree")" &&
  lua5.1 -e 'io.write((require("backoff")._VERSION:gsub("^backoff ", "")))')
rs="$src/rockspec/backoff-$version-1.rockspec"
if [ -n "$version" ] && [ -f "$rs" ] && grep -q "tag = \"v$version\"" "$rs"; then
  ok "rockspec/backoff-$version-1.rockspec matches _VERSION and its source is the tag v$version"
else
  not_ok "no rockspec/backoff-$version-1.rockspec with source tag v$version (_VERSION: backoff $version)"
fi

# 3. the specs against the installed rock, under LuaJIT (the 5.1 ABI:
# the rock's core.so, and its FFI entry points; the quickest of the
# Luas, as busted runs the checkout on every version already)
(cd "$run" && eval "$(luarocks --lua-version 5.1 path --tree "$tree")" &&
  LUA_PATH="$LUA_PATH;;" luajit /usr/bin/busted -o TAP spec) || failed=1

# 4. three more Lua versions into the same tree
for v in 5.4 5.3 5.2; do
  if (cd "$src" && luarocks --lua-version $v make --tree "$tree") >"$work/make$v.log" 2>&1; then
    ok "luarocks --lua-version $v make into the same tree"
  else not_ok "luarocks --lua-version $v make"; show "$work/make$v.log"; fi
done
(cd "$run" && eval "$(luarocks --lua-version 5.4 path --tree "$tree")" &&
  lua5.4 -e 'b = require "backoff"' \
    -e 'p = package.searchpath("backoff.core", package.cpath)' \
    -e 'assert(p:find("tree/lib/lua/5.4/", 1, true), p)' \
    -e 'assert(b.exponential{initial_delay = 1}:failure(0) == 1)') \
  >"$work/load54.log" 2>&1 &&
  ok "lua5.4 loads its own rock from the tree" ||
  { not_ok "lua5.4 does not load its rock"; show "$work/load54.log"; }
backups=$(cd "$tree/bin" && ls -a | grep '~' | tr '\n' ' ')
if [ -z "$backups" ]; then
  ok "four Lua versions in one tree leave no backoff-delays~ behind"
else not_ok "left in $tree/bin: $backups"; fi
# backoff-delays: one launcher for the tree, running the newest version
out=$(limd "$tree/bin/backoff-delays")
if [ "$out" = "$LIMD" ] &&
   sh -x "$tree/bin/backoff-delays" --help 2>&1 >/dev/null |
     grep -q "exec .*/backoff-delays-5.4 --help"; then
  ok "with four versions in the tree, backoff-delays runs backoff-delays-5.4 and prints the LIMD example"
else not_ok "backoff-delays with four versions printed: $out"; fi
for v in 5.1 5.2 5.3 5.4; do
  w=$tree/bin/backoff-delays-$v
  out=$(limd "$w")
  if [ "$out" = "$LIMD" ] && grep -q "/lua$v'" "$w"; then
    ok "backoff-delays-$v runs lua$v and prints the LIMD example"
  else not_ok "backoff-delays-$v: $(head -c 300 "$w" 2>&1) printed: $out"; fi
done
# the issue this layout fixes: a LuaJIT started in the checkout after
# a 5.3 build loads ./backoff/core.so first when one is there (its
# default cpath, as for a rock in /usr/local, starts with ./?.so)
(cd "$src" && LUA_PATH="./?.lua;$tree/share/lua/5.1/?.lua" \
  LUA_CPATH="./?.so;$tree/lib/lua/5.1/?.so" \
  luajit -e 'b = require "backoff"' \
    -e 'p = package.searchpath("backoff.core", package.cpath)' \
    -e 'assert(p:find("tree/lib/lua/5.1/", 1, true), p)' \
    -e 'assert(b.exponential{initial_delay = 1}:failure(0) == 1)') \
  >"$work/luajit.log" 2>&1 &&
  ok "after luarocks --lua-version 5.3 make, luajit started in the checkout (./?.so first) loads the 5.1 rock" ||
  { not_ok "luajit in the checkout after a 5.3 make"; show "$work/luajit.log"; }
if luarocks --lua-version 5.2 remove --tree "$tree" backoff >"$work/remove.log" 2>&1 &&
   [ ! -e "$tree/bin/backoff-delays-5.2" ] && [ -x "$tree/bin/backoff-delays-5.4" ] &&
   [ -x "$tree/bin/backoff-delays-5.1" ] && [ -x "$tree/bin/backoff-delays-5.3" ]; then
  ok "luarocks --lua-version 5.2 remove backoff removes backoff-delays-5.2 only"
else not_ok "luarocks remove for 5.2"; show "$work/remove.log"; ls "$tree/bin" | sed 's/^/# /'; fi
out=$(limd "$tree/bin/backoff-delays")
if [ "$out" = "$LIMD" ]; then ok "after removing the 5.2 rock, backoff-delays still prints the LIMD example"
else not_ok "backoff-delays after the 5.2 removal printed: $out"; fi

# the other build path in the same copy: plain `make` (the README's)
if (cd "$src" && make -s) >"$work/make.log" 2>&1 &&
   [ -f "$src/build/5.4/backoff/core.so" ]; then
  ok "make with no target builds build/5.4/backoff/core.so in a fresh copy"
else not_ok "make with no target in a fresh copy"; show "$work/make.log"; fi

# every version removed: no backoff-delays of any name is left
for v in 5.4 5.3 5.1; do
  luarocks --lua-version $v remove --tree "$tree" backoff >>"$work/remove.log" 2>&1 ||
    not_ok "luarocks --lua-version $v remove backoff"
done
left=$(cd "$tree/bin" 2>/dev/null && ls -a | grep backoff | tr '\n' ' ')
if [ -z "$left" ]; then
  ok "luarocks remove for every version leaves no backoff-delays in the tree's bin/"
else not_ok "left in $tree/bin: $left"; show "$work/remove.log"; fi

# 5. the versioned rockspec builds the same way, for 5.1 and 5.4 into one
# private tree (LuaRocks cannot download here: nothing to fetch)
for v in 5.1 5.4; do
  if [ -f "$rs" ] && (cd "$src" && luarocks --lua-version $v make --tree "$work/tree-v" \
       "rockspec/backoff-$version-1.rockspec") >"$work/make-v$v.log" 2>&1 &&
     luarocks --lua-version $v list --tree "$work/tree-v" --porcelain 2>/dev/null |
       grep -q "^backoff	$version-1	installed" &&
     [ "$(limd "$work/tree-v/bin/backoff-delays-$v")" = "$LIMD" ] &&
     [ "$(limd "$work/tree-v/bin/backoff-delays")" = "$LIMD" ] &&
     got=$(eval "$(luarocks --lua-version $v path --tree "$work/tree-v")" &&
       cd "$run" && lua$v -e 'io.write(require("backoff")._VERSION)') &&
     [ "$got" = "backoff $version" ]; then
    ok "luarocks --lua-version $v make rockspec/backoff-$version-1.rockspec installs backoff $version-1 (its _VERSION) and backoff-delays"
  else not_ok "the versioned rockspec for $v"; show "$work/make-v$v.log"; fi
done

exit $failed
