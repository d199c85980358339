# backoff -- build, install, demo, test and benchmarks.
#
# Targets:
#   make help            this list
#   make demo            build for Lua 5.4 and show the module at work
#   make test            build for 5.1 5.2 5.3 5.4 and LuaJIT, run every test
#   make                 build build/<LUA_VERSION>/backoff/core.so (default 5.4)
#   make install         install core.so, the Lua modules and backoff-delays
#   make uninstall       remove what `make install` installed
#   make print           the configuration and the paths install would use
#   make bench           call costs, the herd, the deadline, the outage:
#                        writes bench/results.md (LuaJIT and 5.4 only)
#   make jit-check       the LuaJIT bench in 30 fresh processes: in how many
#                        the retry row's loop ran as one loop trace (all)
#   make bench-nginx     worker CPU per request in a real nginx (wrk):
#                        writes bench/results-nginx.md
#   make bench-hedge     hedged requests against a slow tail in a real
#                        nginx: writes bench/results-hedge.md
#   make outage          retry storms: every budget kind against partial and
#                        full outages, a brownout, timeouts, a flapping
#                        upstream, a metastable storm, quiet processes:
#                        writes bench/results-outage.md, build/outage-*.svg
#   make herd-reference  the herd re-run by an independent model (Python):
#                        writes bench/results-herd-reference.md
#   make ctest           C tests of the core (cmocka, ASan + UBSan)
#   make core-alone      the core compiled with no Lua headers
#   make asan-busted     busted against an ASan + UBSan build (V, default 5.4)
#   make valgrind        valgrind over spec/valgrind_smoke.lua (V, default 5.4)
#   make allocfail       every allocation of the smoke script fails in turn
#   make forged          forged userdata refused by every method
#   make fuzz            libFuzzer on the core (FUZZ_TIME=60 seconds)
#   make threads         threads driving their own objects, under TSan
#   make fresh-boot      busted with the clock of a machine booted 1 min ago
#   make busted-as-documented  `busted` alone, as the README runs it
#   make install-test    make install into scratch trees, loaded from there
#                        by lua5.1, lua5.4, luajit and a real nginx
#   make docs-test       every code block of README.md and doc/ run as
#                        pasted (lua5.1, lua5.4, luajit, a real nginx)
#   make rock-test       luarocks make (5.1 to 5.4), specs against the rock
#   make lint            luacheck
#   make house           the house rules: no call, include or require
#                        circle, no file over 500 lines, no Lua function
#                        above complexity 15 (spec/house/)
#   make clean           remove build/ (and in-place builds of old versions)
#   make rock-build, make rock-install   what `luarocks make` runs
#
# Variables (make VAR=value; `make print` shows the paths they give):
#   LUA_VERSION          5.1, 5.2, 5.3, 5.4 or luajit (default 5.4): the
#                        module built and installed
#   V                    the version for asan-busted, valgrind and
#                        fresh-boot (default LUA_VERSION)
#   PREFIX               install prefix (default /usr/local)
#   DESTDIR              staging directory put before every install path
#   LUA_INCLUDE_DIR      the Lua headers (or LuaRocks' LUA_INCDIR;
#                        default Debian's for LUA_VERSION)
#   LUA_CMODULE_DIR      where core.so goes (PREFIX/lib/lua/5.x)
#   LUA_MODULE_DIR       where the Lua modules go (PREFIX/share/lua/5.x)
#   LUA_BIN_DIR, BINDIR  where backoff-delays goes (PREFIX/bin)
#   LUA                  the interpreter named in backoff-delays' first
#                        line (default lua5.x or luajit)
#   CC, CFLAGS, LIBFLAG  the compiler (cc), its flags (-O2 -g) and the
#                        shared-object flag (-shared)
#   INSTALL              the install program (default install)
#   FUZZ_TIME            seconds of make fuzz (default 60)
#   JIT_PROCESSES        fresh processes of make jit-check (default 30)
# The install variables are lua-cjson's.
#
# Missing Debian packages are installed (as root) or named (otherwise)
# by .ci/deps, each target asking only for what it needs; a
# LUA_INCLUDE_DIR of your own means no Lua package is asked for.  The
# module never links liblua: the interpreter that loads it provides the
# Lua API.

LUA_VERSIONS := 5.1 5.2 5.3 5.4 luajit
LUA_VERSION ?= 5.4
V ?= $(LUA_VERSION)

# one version, one of the list
check_version = $(if $(and $(filter 1,$(words $($1))),$(filter $($1),$(LUA_VERSIONS))),,\
  $(error $1=$($1): use one of $(LUA_VERSIONS)))
$(call check_version,LUA_VERSION)
$(call check_version,V)

CC      ?= cc
CFLAGS  ?= -O2 -g
LIBFLAG ?= -shared
WARN    := -std=c99 -pedantic -Wall -Wextra -Wshadow -Wundef -Wcast-qual \
           -Wcast-align -Wwrite-strings -Wstrict-prototypes \
           -Wmissing-prototypes -Wmissing-declarations -Wredundant-decls \
           -Wdouble-promotion -Wdeclaration-after-statement
BUILD   := build

# The sources, in this one place: the core (no Lua) is csrc/backoff*.c,
# the binding csrc/l*.c.  The rock is
# built by this Makefile too (rock-build), so no other list exists.
CORE_SRC    := $(sort $(wildcard csrc/backoff*.c))
BINDING_SRC := $(sort $(wildcard csrc/l*.c))
HEADERS     := $(wildcard csrc/*.h)
CORE        := $(CORE_SRC) $(HEADERS)
BINDING     := $(BINDING_SRC) $(HEADERS)
# the Lua modules, as paths under lua/: backoff.lua, backoff/cli.lua, ...
LUA_MODULES := $(patsubst lua/%,%,$(sort $(wildcard lua/*.lua lua/*/*.lua \
                                               lua/*/*/*.lua)))

# interpreter, Debian headers and Debian packages of one version
lua_bin = $(if $(filter luajit,$1),luajit,lua$1)
lua_abi = $(if $(filter luajit,$1),5.1,$1)
lua_inc_debian = $(if $(filter luajit,$1),/usr/include/luajit-2.1,/usr/include/lua$1)
lua_dev = $(if $(filter luajit,$1),luajit2 libluajit2-5.1-dev,$(if $(filter 5.1,$1),lua5.1 liblua5.1-0-dev,lua$1 liblua$1-dev))

# ---- install variables (lua-cjson's names) -------------------------
# Headers of your own (OpenResty's, say) mean: ask for no Lua package.
OWN_HEADERS := $(filter command% environment%,$(origin LUA_INCLUDE_DIR) $(origin LUA_INCDIR))
LUA_INCLUDE_DIR ?= $(or $(LUA_INCDIR),$(call lua_inc_debian,$(LUA_VERSION)))
PREFIX          ?= /usr/local
LUA_CMODULE_DIR ?= $(PREFIX)/lib/lua/$(call lua_abi,$(LUA_VERSION))
LUA_MODULE_DIR  ?= $(PREFIX)/share/lua/$(call lua_abi,$(LUA_VERSION))
LUA_BIN_DIR     ?= $(PREFIX)/bin
BINDIR          ?= $(LUA_BIN_DIR)
LUA             ?= $(call lua_bin,$(LUA_VERSION))
INSTALL         ?= install

# the headers a version is built with: LUA_INCLUDE_DIR for LUA_VERSION,
# Debian's for the others
lua_inc = $(if $(filter $1,$(LUA_VERSION)),$(LUA_INCLUDE_DIR),$(call lua_inc_debian,$1))

ifneq ($(wildcard backoff/core.so csrc/*.o csrc/*.so),)
$(warning backoff: $(wildcard backoff/core.so csrc/*.o csrc/*.so) in the checkout: left by an older `luarocks make`; Lua 5.1 and LuaJIT load ./backoff/core.so first; `make clean` removes them)
endif

# ---- Debian packages per need --------------------------------------
COMPILER   := $(if $(filter default,$(origin CC)),gcc) libc6-dev
# to build the module for version $1
build_pkgs  = $(COMPILER) $(if $(and $(OWN_HEADERS),$(filter $1,$(LUA_VERSION))),,$(call lua_dev,$1))
PKGS_demo  := $(call build_pkgs,5.4) luarocks
PKGS_test  := $(COMPILER) $(foreach v,$(LUA_VERSIONS),$(call lua_dev,$(v))) \
              lua-busted lua-check lua-socket luarocks libcmocka-dev \
              valgrind clang libclang-rt-dev nginx libnginx-mod-http-lua \
              python3-prometheus-client chromium redis-server
PKGS_bench := $(call build_pkgs,5.4) $(call build_pkgs,luajit)
PKGS_jit-check := $(call build_pkgs,luajit)
PKGS_bench-nginx := $(call build_pkgs,luajit) lua5.4 lua-socket nginx \
              libnginx-mod-http-lua wrk
PKGS_bench-hedge := $(call build_pkgs,luajit) lua5.4 lua-socket nginx \
              libnginx-mod-http-lua
PKGS_outage := $(call build_pkgs,luajit)
PKGS_herd-reference := $(call build_pkgs,luajit) python3
PKGS_ctest := $(COMPILER) libcmocka-dev
PKGS_cc    := $(COMPILER)
PKGS_lua54-host := $(COMPILER) liblua5.4-dev
PKGS_fuzz  := clang libclang-rt-dev
PKGS_asan  := $(call build_pkgs,$(V)) lua-busted
PKGS_valgrind := $(call build_pkgs,$(V)) valgrind
PKGS_busted := $(call build_pkgs,5.4) lua-busted
PKGS_fresh-boot := $(call build_pkgs,$(V)) lua-busted util-linux
PKGS_install-test := $(foreach v,5.1 5.4 luajit,$(call build_pkgs,$(v))) \
              lua-socket nginx libnginx-mod-http-lua
PKGS_docs-test := $(PKGS_install-test) curl
PKGS_rock-test := $(COMPILER) $(foreach v,$(LUA_VERSIONS),$(call lua_dev,$(v))) \
              luarocks lua-busted binutils
PKGS_lint  := lua-check
PKGS_house := $(call build_pkgs,5.4) lua-check binutils

# every target (`make lint` checks that `make help` lists them all)
TARGETS := all demo test install uninstall print help bench jit-check \
           bench-nginx bench-hedge \
           outage herd-reference ctest core-alone asan-busted \
           valgrind allocfail forged fuzz threads fresh-boot \
           busted-as-documented install-test docs-test rock-test lint house \
           clean \
           rock-build rock-install
.PHONY: $(TARGETS) test-lane-a test-lane-b test-lane-servers FORCE
# build/<v>/flags is made by a pattern rule only: keep it
.PRECIOUS: $(BUILD)/%/flags

# the module of version $1 (defined before any rule names it: make
# expands prerequisites as it reads them)
MODULE = $(BUILD)/$(1)/backoff/core.so

all: $(call MODULE,$(LUA_VERSION))

help:
	@sed -n '/^# Targets/,/^#$$/s/^#   //p' $(firstword $(MAKEFILE_LIST))
	@echo
	@sed -n '/^# Variables/,/^#$$/{/^# Variables/s/^# //p;s/^#   /  /p;}' \
	  $(firstword $(MAKEFILE_LIST))

# deps-NAME installs (as root) or names the packages of PKGS_NAME;
# deps-lua-V those that build the module for version V
# (static pattern rules, so that they are phony, not intermediate files)
DEPS_LUA := $(addprefix deps-lua-,$(LUA_VERSIONS))
DEPS     := $(patsubst PKGS_%,deps-%,$(filter PKGS_%,$(.VARIABLES)))
.PHONY: $(DEPS_LUA) $(DEPS)
$(DEPS_LUA): deps-lua-%:
	@sh .ci/deps $(call build_pkgs,$*)
$(DEPS): deps-%:
	@sh .ci/deps $(PKGS_$*)
FORCE:

# ---- the module ----------------------------------------------------

# every build of the module: only luaopen_backoff_core and the FFI entry
# points exported (BACKOFF_HIDDEN hides the core's API too), and no
# fused multiply-add, which would change the systems' truncated results
# on machines that have it
MODULE_FLAGS := -fPIC -fvisibility=hidden -DBACKOFF_HIDDEN -ffp-contract=off
module_cmd = $(CC) $(CFLAGS) $(WARN) $(MODULE_FLAGS) \
  -I$(call lua_inc,$1) -Icsrc -o $(call MODULE,$1) $(CORE_SRC) \
  $(BINDING_SRC) $(LIBFLAG) -lm

# build/<v>/flags holds the command a module is built with, rewritten
# only when it changes (CC, CFLAGS, headers, sources): then it rebuilds
$(BUILD)/%/flags: FORCE
	@mkdir -p $(@D)
	@echo '$(subst ','\'',$(call module_cmd,$*))' | cmp -s - $@ 2>/dev/null \
	  || echo '$(subst ','\'',$(call module_cmd,$*))' >$@

$(BUILD)/%/backoff/core.so: $(CORE) $(BINDING) $(BUILD)/%/flags | deps-lua-%
	@test -f '$(call lua_inc,$*)/lua.h' || { echo "backoff: no lua.h in" \
	  "$(call lua_inc,$*): set LUA_INCLUDE_DIR to your Lua's headers" >&2; \
	  exit 1; }
	@mkdir -p $(@D)
	$(call module_cmd,$*)

# the module with ASan + UBSan (float-cast-overflow on), for PUC Lua
$(BUILD)/asan-%/backoff/core.so: $(CORE) $(BINDING) | deps-lua-%
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -fPIC -I$(call lua_inc,$*) \
	  -Icsrc -o $@ $(CORE_SRC) $(BINDING_SRC) -shared -lm

# run Lua code against the build of version $(1)
LUA_ENV = LUA_PATH='./lua/?.lua;;' LUA_CPATH='./$(BUILD)/$(1)/?.so;;'

demo: deps-demo $(call MODULE,5.4)
	@$(call LUA_ENV,5.4) lua5.4 examples/demo.lua

print:
	@echo "LUA_VERSION=$(LUA_VERSION) CC=$(CC) CFLAGS=$(CFLAGS) LIBFLAG=$(LIBFLAG)"
	@echo "module: $(call MODULE,$(LUA_VERSION)) (headers: $(LUA_INCLUDE_DIR))"
	@echo "install: $(DESTDIR)$(LUA_CMODULE_DIR)/backoff/core.so"
	@echo "         $(DESTDIR)$(LUA_MODULE_DIR)/: $(LUA_MODULES)"
	@echo "         $(DESTDIR)$(BINDIR)/backoff-delays (runs $(LUA))"
	@echo "         $(DESTDIR)$(DIRS_RECORD) (the directories it created, for uninstall)"

# ---- install (make install, and LuaRocks' build.type = "make") -----

# the first line of an installed backoff-delays: LUA by name, through
# env, or LUA itself when it is a path.  The script then appends the
# install directories to its search paths, so that it finds the modules
# where the interpreter's defaults do not look (a PREFIX of your own,
# OpenResty's lualib), while LUA_PATH and the defaults still come first.
SHEBANG = $(if $(filter /%,$(LUA)),$(LUA),/usr/bin/env $(LUA))

# echo, or nothing under make -s
ECHO = $(if $(findstring s,$(firstword -$(MAKEFLAGS))),:,echo)

# install-files CMODULE LIBDIR LUADIR: core.so and every Lua module
define install-files
	$(INSTALL) -d '$(2)/backoff'
	$(INSTALL) -m 755 '$(1)' '$(2)/backoff/core.so'
	@set -e; for m in $(LUA_MODULES); do \
	  $(ECHO) "$(INSTALL) -m 644 lua/$$m '$(3)/$$m'"; \
	  $(INSTALL) -d "$$(dirname '$(3)'/$$m)"; \
	  $(INSTALL) -m 644 lua/$$m '$(3)'/$$m; done
endef

# the directories install fills: the modules' (LUA_MODULE_DIR and its
# backoff/, backoff/budget/, ...), core.so's and backoff-delays'; the
# package's own (backoff/ and below) are always removed by uninstall
MODULE_DIRS = $(sort $(patsubst %/,%,$(dir $(addprefix $(LUA_MODULE_DIR)/,$(LUA_MODULES)))))
OWN_DIRS    = $(LUA_CMODULE_DIR)/backoff $(filter-out $(LUA_MODULE_DIR),$(MODULE_DIRS))
# the directories install created (their paths without DESTDIR, one a
# line), kept beside the modules so that uninstall removes those, once
# empty, and no directory that was there before
DIRS_RECORD = $(LUA_MODULE_DIR)/backoff/.installed-dirs

install: $(call MODULE,$(LUA_VERSION))
	@for d in '$(DESTDIR)$(LUA_CMODULE_DIR)' '$(DESTDIR)$(LUA_MODULE_DIR)' \
	    '$(DESTDIR)$(BINDIR)'; do p=$$d; \
	  while [ ! -e "$$p" ]; do p=$$(dirname "$$p"); done; \
	  [ -w "$$p" ] || { echo "backoff: cannot write to $$p (for $$d):" \
	    "run as root, or set PREFIX or DESTDIR (make print shows the paths)" >&2; \
	    exit 1; }; done
	@for d in '$(LUA_CMODULE_DIR)/backoff' '$(BINDIR)' \
	    $(foreach d,$(MODULE_DIRS),'$(d)'); do p=$$d; \
	  while [ "$$p" != / ] && [ "$$p" != . ] && [ ! -d '$(DESTDIR)'"$$p" ]; do \
	    echo "$$p"; p=$$(dirname "$$p"); done; \
	done >$(BUILD)/$(LUA_VERSION)/installed-dirs
	$(call install-files,$(call MODULE,$(LUA_VERSION)),$(DESTDIR)$(LUA_CMODULE_DIR),$(DESTDIR)$(LUA_MODULE_DIR))
	$(INSTALL) -d '$(DESTDIR)$(BINDIR)'
	@mkdir -p $(BUILD)
	sed -e '1s|.*|#!$(SHEBANG)|' -e '1a\
-- where make install put the modules, after LUA_PATH and the defaults\
package.path = package.path .. ";$(LUA_MODULE_DIR)/?.lua"\
package.cpath = package.cpath .. ";$(LUA_CMODULE_DIR)/?.so"' \
	  bin/backoff-delays >$(BUILD)/backoff-delays
	$(INSTALL) -m 755 $(BUILD)/backoff-delays '$(DESTDIR)$(BINDIR)/backoff-delays'
	@rec='$(DESTDIR)$(DIRS_RECORD)'; \
	  cat "$$rec" $(BUILD)/$(LUA_VERSION)/installed-dirs 2>/dev/null | \
	    LC_ALL=C sort -u >$(BUILD)/$(LUA_VERSION)/installed-dirs.all && \
	  $(INSTALL) -m 644 $(BUILD)/$(LUA_VERSION)/installed-dirs.all "$$rec"

# the files, then the package's own directories and those install
# created, deepest first, each only once empty (another package's file,
# or another Lua version's backoff-delays, keeps its directory)
uninstall:
	rm -f '$(DESTDIR)$(LUA_CMODULE_DIR)/backoff/core.so' \
	  '$(DESTDIR)$(BINDIR)/backoff-delays' \
	  $(foreach m,$(LUA_MODULES),'$(DESTDIR)$(LUA_MODULE_DIR)/$(m)')
	@rec='$(DESTDIR)$(DIRS_RECORD)'; created=$$(cat "$$rec" 2>/dev/null); \
	  rm -f "$$rec"; \
	  { printf '%s\n' $(foreach d,$(OWN_DIRS),'$(d)'); \
	    printf '%s\n' "$$created"; } | LC_ALL=C sort -ru | \
	  while IFS= read -r d; do \
	    [ -z "$$d" ] || [ ! -d '$(DESTDIR)'"$$d" ] || \
	      { rmdir '$(DESTDIR)'"$$d" 2>/dev/null && \
	        $(ECHO) "rmdir '$(DESTDIR)$$d'"; } || true; done

# What `luarocks make` runs (rockspec/: build.type = "make"): rock-build
# with CC, CFLAGS, LIBFLAG, LUA_INCDIR and LUA, then rock-install with
# LUADIR, LIBDIR and BINDIR too, all LuaRocks' own values.  Everything is
# built under build/rock/ (never ./backoff/core.so or csrc/*.o, which
# Lua 5.1 and LuaJIT would load from a checkout: their cpath starts with
# ./?.so), with hidden visibility, and nothing is ever installed with
# apt-get from here.  backoff-delays is installed as backoff-delays-5.x
# (the Lua version: 5.1 for LuaJIT), so rocks for several Lua versions
# in one tree do not fight over one file: LuaRocks moves a file it does
# not track for this version aside as backoff-delays~, ~~, ~~~.  The
# documented name, backoff-delays, is a launcher (bin/backoff-delays-
# launcher) that runs the newest backoff-delays-5.x beside it; in a tree
# it belongs to one version's rock: a rock ships it unless the tree has
# one already that this version's manifest does not list (another
# version's; this version's own, from an older release, is replaced as
# LuaRocks replaces any file).  BINDIR is then
# <tree>/lib/luarocks/rocks-5.x/backoff/<version>/bin; in any other
# layout the launcher is shipped.
ROCK_OUT = $(BUILD)/rock/$(notdir $(LUA))
rock-build:
	@test -f '$(LUA_INCLUDE_DIR)/lua.h' || { echo "backoff: no lua.h in" \
	  "LUA_INCDIR=$(LUA_INCLUDE_DIR): install your Lua's headers" \
	  "(Debian: liblua5.x-dev, or libluajit2-5.1-dev for LuaJIT)" >&2; exit 1; }
	@rm -rf $(ROCK_OUT) && mkdir -p $(ROCK_OUT)
	$(CC) $(CFLAGS) $(WARN) $(MODULE_FLAGS) -I$(LUA_INCLUDE_DIR) \
	  -Icsrc -o $(ROCK_OUT)/core.so $(CORE_SRC) $(BINDING_SRC) $(LIBFLAG) -lm

rock-install:
	@test -f $(ROCK_OUT)/core.so || { echo "backoff: no $(ROCK_OUT)/core.so:" \
	  "run make rock-build (with the same LUA) first" >&2; exit 1; }
	@test -n '$(LUADIR)' && test -n '$(LIBDIR)' || { echo "backoff:" \
	  "rock-install needs LUADIR, LIBDIR and BINDIR (luarocks make passes" \
	  "them); to install by hand, use make install" >&2; exit 1; }
	$(call install-files,$(ROCK_OUT)/core.so,$(LIBDIR),$(LUADIR))
	$(INSTALL) -d '$(BINDIR)'
	@v=$$($(LUA) -e 'io.write((_VERSION:gsub("^Lua ", "")))') && \
	  $(ECHO) "$(INSTALL) -m 755 bin/backoff-delays '$(BINDIR)/backoff-delays-$$v'" && \
	  $(INSTALL) -m 755 bin/backoff-delays "$(BINDIR)/backoff-delays-$$v"
	@tree_bin=; case '$(BINDIR)' in */lib/luarocks/rocks-*/*/*/bin) \
	  rocks=$$(cd '$(BINDIR)/../../..' && pwd) && \
	  tree_bin=$$(cd "$$rocks/../../.." && pwd)/bin ;; esac; \
	if [ -n "$$tree_bin" ] && [ -e "$$tree_bin/backoff-delays" ] && \
	   ! grep -q '\["backoff-delays"\]' "$$rocks/manifest" 2>/dev/null; then \
	  $(ECHO) "backoff: $$tree_bin/backoff-delays is another Lua version's:" \
	    "it runs this one too"; \
	else \
	  $(ECHO) "$(INSTALL) -m 755 bin/backoff-delays-launcher '$(BINDIR)/backoff-delays'"; \
	  $(INSTALL) -m 755 bin/backoff-delays-launcher '$(BINDIR)/backoff-delays'; \
	fi

# ---- tests ---------------------------------------------------------

TAP_DIR := $(BUILD)/tap
SUITE   := TAP_DIR=$(TAP_DIR) sh spec/run-suite
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer
# busted under a given interpreter: --ignore-lua, or .busted's `lua`
# setting would run it under lua5.4 whatever the interpreter
BUSTED  := /usr/bin/busted --ignore-lua

test: deps-test $(foreach v,$(LUA_VERSIONS),$(call MODULE,$(v)))
	@rm -rf $(TAP_DIR)
	@$(SUITE) demo sh -c '$(MAKE) -s demo >$(BUILD)/demo.out 2>&1 \
	  && echo "ok - make demo runs to the end" \
	  || { cat $(BUILD)/demo.out; echo "not ok - make demo failed"; }'
	@$(SUITE) core-without-lua $(MAKE) -s core-alone
	@$(SUITE) c-core $(MAKE) -s ctest
	@echo "== three lanes side by side: their output follows"
	@nice -n 10 $(MAKE) -s test-lane-a >$(BUILD)/lane-a.log 2>&1 & \
	  nice -n 10 $(MAKE) -s test-lane-b >$(BUILD)/lane-b.log 2>&1 & \
	  $(MAKE) -s test-lane-servers >$(BUILD)/lane-servers.log 2>&1 & \
	  wait; \
	  cat $(BUILD)/lane-a.log $(BUILD)/lane-b.log $(BUILD)/lane-servers.log
	@$(SUITE) docs-run $(MAKE) -s docs-test
	@$(SUITE) nginx timeout 300 lua5.4 spec/nginx/run.lua $(CURDIR)
	@$(SUITE) nginx-fleet timeout 120 lua5.4 spec/nginx/fleet.lua $(CURDIR)
	@$(SUITE) nginx-budgets timeout 120 lua5.4 spec/nginx/fleet_budget.lua $(CURDIR)
	@$(SUITE) nginx-http timeout 120 lua5.4 spec/nginx/http.lua $(CURDIR)
	@$(SUITE) nginx-hedge timeout 120 lua5.4 spec/nginx/hedge.lua $(CURDIR)
	@$(SUITE) nginx-balancer timeout 300 lua5.4 spec/nginx/balancer.lua \
	  $(CURDIR)
	@$(SUITE) nginx-breaker timeout 120 lua5.4 spec/nginx/breaker.lua $(CURDIR)
	@$(SUITE) nginx-store timeout 120 lua5.4 spec/nginx/store.lua $(CURDIR)
	@$(SUITE) nginx-upstream timeout 150 lua5.4 spec/nginx/upstream.lua $(CURDIR)
	@sh spec/tap-summary $(TAP_DIR)

# The suites that measure no time run in two lanes side by side, about
# four minutes each, at a lower priority (nice 10); beside them the two
# long real-server suites, which are mostly waiting (a 60 s outage at
# 40 requests/s; Redis paused for 30 s) and whose nginx keeps the
# normal priority, so that the lanes cannot delay what they time.  The
# other real-server suites run after them, alone.  Each lane is a part
# of `make test` (its TAP goes to the same place), not a target of its
# own.
test-lane-servers:
	@$(SUITE) nginx-breaker-days timeout 300 lua5.4 \
	  spec/nginx/breaker_days.lua $(CURDIR)
	@$(SUITE) nginx-fleet-redis timeout 240 lua5.4 spec/nginx/fleet_redis.lua \
	  $(CURDIR)

test-lane-a:
	@$(SUITE) allocfail $(MAKE) -s allocfail
	@for v in 5.1 5.4 luajit; do \
	  $(SUITE) asan-busted-$$v $(MAKE) -s asan-busted V=$$v; done
	@$(SUITE) fuzz $(MAKE) -s fuzz FUZZ_TIME=20

# busted on 5.4 is the run the README documents (`busted`, as .busted
# says: lua5.4 and build/5.4)
test-lane-b:
	@for v in $(filter-out 5.4,$(LUA_VERSIONS)); do \
	  case $$v in luajit) lua=luajit ;; *) lua=lua$$v ;; esac; \
	  $(SUITE) busted-$$v $$lua $(BUSTED) \
	    --lpath='./lua/?.lua' --cpath="./$(BUILD)/$$v/?.so" -o TAP spec; \
	done
	@BACKOFF_NO_FFI=1 $(SUITE) busted-luajit-noffi luajit $(BUSTED) \
	  --lpath='./lua/?.lua' --cpath="./$(BUILD)/luajit/?.so" -o TAP spec
	@$(SUITE) busted-5.4-as-documented $(MAKE) -s busted-as-documented
	@for v in luajit 5.4; do \
	  $(SUITE) fresh-boot-$$v $(MAKE) -s fresh-boot V=$$v; done
	@for v in 5.1 5.4 luajit; do \
	  $(SUITE) valgrind-$$v $(MAKE) -s valgrind V=$$v; done
	@$(SUITE) forged $(MAKE) -s forged
	@$(SUITE) threads $(MAKE) -s threads
	@$(SUITE) make-install $(MAKE) -s install-test
	@$(SUITE) luarocks-make $(MAKE) -s rock-test
	@$(SUITE) luacheck $(MAKE) -s lint
	@$(SUITE) house $(MAKE) -s house

# the core must build with no Lua include path at all
core-alone: deps-cc
	@mkdir -p $(BUILD)
	@for f in $(CORE_SRC); do \
	  $(CC) $(WARN) -Werror -c $$f -o $(BUILD)/alone.o || exit 1; \
	  echo "ok - $$f builds with -std=c99 -pedantic -Werror and no Lua headers"; \
	done

# C tests of the core (cmocka, TAP output) under ASan and UBSan
$(BUILD)/test_backoff: spec/c/test_backoff.c $(CORE) | deps-ctest
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -Icsrc -o $@ \
	  spec/c/test_backoff.c $(CORE_SRC) -lcmocka -lm

ctest: $(BUILD)/test_backoff
	@CMOCKA_MESSAGE_OUTPUT=TAP $(BUILD)/test_backoff

# `busted` alone, as the README says to run it after `make`: .busted
# names lua5.4 (Debian's `lua` may be 5.2, whose busted cannot load the
# 5.4 module) and the paths of the 5.4 build
busted-as-documented: deps-busted $(call MODULE,5.4)
	@busted -o TAP

# The specs inside a time namespace whose monotonic and boot clocks read
# one minute after boot, as on a machine booted a minute ago: no test
# may depend on the clock's absolute value or the machine's uptime
# (V = luajit or 5.4; no root needed: unshare -r)
fresh-boot: deps-fresh-boot $(call MODULE,$(V))
	@sh spec/fresh-boot $(call lua_bin,$(V)) ./$(BUILD)/$(V)/?.so

# make install into scratch trees (5.1, 5.4, LuaJIT, OpenResty's layout),
# then require "backoff" from there only: lua5.1, lua5.4, luajit, nginx
install-test: deps-install-test $(foreach v,5.1 5.4 luajit,$(call MODULE,$(v)))
	@MAKE='$(MAKE)' timeout 300 lua5.4 spec/install/run.lua $(CURDIR)

# every fenced code block of README.md and doc/*.md: run as pasted, or
# marked a fragment (CONTRIBUTING.md, "Docs that run"); then
# examples/retry.lua, and the proof that it fails on a broken doc
docs-test: deps-docs-test $(foreach v,5.1 5.4 luajit,$(call MODULE,$(v)))
	@timeout 600 lua5.4 spec/docs/run.lua $(CURDIR)

# the other build path: `luarocks make` into a private tree from a copy
# of the checkout, then the specs against the installed rock only
rock-test: deps-rock-test
	@sh spec/rock/run.sh $(CURDIR) $(BUILD)/rock-test

# the whole busted suite against the sanitizer build (LD_PRELOAD puts
# the ASan runtime first, as a plain lua binary is not instrumented)
ASAN_RT = $(shell $(CC) -print-file-name=libasan.so)
asan-busted: deps-asan $(BUILD)/asan-$(V)/backoff/core.so
	@LD_PRELOAD=$(ASAN_RT) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(call lua_bin,$(V)) $(BUSTED) --lpath='./lua/?.lua' \
	  --cpath='./$(BUILD)/asan-$(V)/?.so' -o TAP spec

# valgrind over the smoke script (V = 5.1, 5.4 or luajit; default 5.4)
valgrind: deps-valgrind $(call MODULE,$(V))
	@$(call LUA_ENV,$(V)) valgrind -q --error-exitcode=1 --leak-check=full \
	  --errors-for-leak-kinds=definite,indirect --track-origins=yes \
	  $(call lua_bin,$(V)) spec/valgrind_smoke.lua \
	  && echo "ok - valgrind: no error, no leak ($(call lua_bin,$(V)))"

# C programs hosting Lua 5.4 with the module linked in, under ASan+UBSan
LUA_HOSTS := $(BUILD)/allocfail $(BUILD)/forged
$(LUA_HOSTS): $(BUILD)/%: spec/c/%.c $(CORE) $(BINDING) | deps-lua54-host
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -I$(call lua_inc,5.4) -Icsrc \
	  -o $@ $< $(CORE_SRC) $(BINDING_SRC) -llua5.4 -lm

# every allocation of the smoke script failed in turn
allocfail: $(BUILD)/allocfail
	@ASAN_OPTIONS=detect_leaks=1 $(BUILD)/allocfail \
	  spec/valgrind_smoke.lua './lua/?.lua' | grep -v '^valgrind_smoke'

# userdata of our size forged in C with our metatable
forged: $(BUILD)/forged
	@ASAN_OPTIONS=detect_leaks=1 $(BUILD)/forged

# libFuzzer on the core: make fuzz FUZZ_TIME=600 (seconds)
FUZZ_TIME ?= 60
$(BUILD)/fuzz_backoff: spec/fuzz/fuzz_backoff.c $(CORE) | deps-fuzz
	@mkdir -p $(@D)
	clang -O1 -g -std=c99 -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=all -Icsrc -o $@ spec/fuzz/fuzz_backoff.c \
	  $(CORE_SRC) -lm

fuzz: $(BUILD)/fuzz_backoff
	@mkdir -p $(BUILD)/fuzz-corpus
	@$(BUILD)/fuzz_backoff -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
	  $(BUILD)/fuzz-corpus spec/fuzz/corpus >$(BUILD)/fuzz.log 2>&1; \
	  s=$$?; tail -n 3 $(BUILD)/fuzz.log | sed 's/^/# /'; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(BUILD)/fuzz.log); \
	  if [ $$s -eq 0 ]; then echo "ok - libFuzzer: $$runs executions in $(FUZZ_TIME) s, every invariant held"; \
	  else cat $(BUILD)/fuzz.log | tail -n 40; echo "not ok - libFuzzer found a failure"; exit 1; fi

# threads each driving their own objects, under TSan
$(BUILD)/threads: spec/c/threads.c $(CORE) | deps-cc
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror -fsanitize=thread -pthread -Icsrc -o $@ \
	  spec/c/threads.c $(CORE_SRC) -lm

threads: $(BUILD)/threads
	@TSAN_OPTIONS=halt_on_error=1 $(BUILD)/threads

lint: deps-lint
	@luacheck -q --no-color lua spec examples bench bin/backoff-delays && echo "ok - luacheck: no warnings"
	@h=$$($(MAKE) -s help); missing=; \
	  for t in $(filter-out all,$(TARGETS)); do \
	    printf '%s\n' "$$h" | grep -qE "(^|, )make $$t( |,|$$)" || \
	      missing="$$missing $$t"; done; \
	  if [ -z "$$missing" ]; then echo "ok - make help lists every target"; \
	  else echo "not ok - make help does not list:$$missing"; exit 1; fi
	@h=$$($(MAKE) -s help); missing=; \
	  for v in DESTDIR $$(sed -n 's/^\([A-Z_][A-Z_]*\) *?=.*/\1/p' \
	      $(firstword $(MAKEFILE_LIST))); do \
	    printf '%s\n' "$$h" | grep -qE "^  ([A-Z_]+, )*$$v( |,|$$)" || \
	      missing="$$missing $$v"; done; \
	  if [ -z "$$missing" ]; then echo "ok - make help lists every variable (?=)"; \
	  else echo "not ok - make help does not list:$$missing"; exit 1; fi

# The house rules of CONTRIBUTING.md, checked on the tree: each csrc/*.c
# compiled alone with the module's flags (its symbols give the call
# graph), the #include and require graphs, lines per file, and
# luacheck's cyclomatic complexity.  Each check first proves on the
# fixtures of spec/house/fixtures/ that it catches what it looks for.
house: deps-house
	@HOUSE_CC='$(subst ','\'',$(CC) $(CFLAGS) $(WARN) $(MODULE_FLAGS) -I$(call lua_inc,5.4) -Icsrc)' \
	  HOUSE_OUT=$(BUILD)/house lua5.4 spec/house/run.lua $(CURDIR)

# ---- benchmarks (not part of make test) ----------------------------
# Each writes its figures into a results file under bench/ (through
# bench/record: date, commit, machine, the exact commands, their output)

RECORD = sh bench/record

$(BUILD)/%/bench_empty.so: bench/empty.c | deps-lua-%
	@mkdir -p $(@D)
	$(CC) -O2 -std=c99 -fPIC -I$(call lua_inc,$*) -o $@ bench/empty.c $(LIBFLAG)

# the outage matrix and the bad days in virtual time (about 2.5 minutes of
# CPU), its targets checked: build/outage.csv, build/outage-<event>.svg
OUTAGE = $(call LUA_ENV,luajit) luajit bench/outage.lua \
	  --csv $(BUILD)/outage.csv --svg $(BUILD)/outage.svg --markdown --check
FLEET_MODEL = $(call LUA_ENV,luajit) luajit bench/fleet_model.lua 1000
HERD = $(call LUA_ENV,luajit) luajit bench/herd.lua --csv $(BUILD)/herd.csv \
	  --svg $(BUILD)/herd.svg

bench: deps-bench $(call MODULE,5.4) $(call MODULE,luajit) \
       $(BUILD)/5.4/bench_empty.so $(BUILD)/luajit/bench_empty.so
	@$(RECORD) start $(BUILD)/results.md "make bench"
	@$(RECORD) run $(BUILD)/results.md "Call costs, Lua 5.4" \
	  "$(call LUA_ENV,5.4) lua5.4 bench/bench.lua"
	@$(RECORD) run $(BUILD)/results.md "Call costs, LuaJIT, in 5 fresh processes" \
	  "$(call LUA_ENV,luajit) luajit bench/jit_check.lua --processes 5 --table"
	@$(RECORD) run $(BUILD)/results.md "The thundering herd" "$(HERD)"
	@$(RECORD) run $(BUILD)/results.md "The deadline" \
	  "$(call LUA_ENV,5.4) lua5.4 bench/deadline.lua"
	@$(RECORD) run $(BUILD)/results.md "Retry storms: the outage" "$(OUTAGE)"
	@mv $(BUILD)/results.md bench/results.md
	@echo "figures written to bench/results.md"

# the LuaJIT bench (200,000 calls a row) in 30 fresh processes: fails
# unless the retry row's loop ran as one loop trace in every one
JIT_PROCESSES ?= 30
jit-check: deps-jit-check $(call MODULE,luajit) $(BUILD)/luajit/bench_empty.so
	@$(call LUA_ENV,luajit) luajit bench/jit_check.lua \
	  --processes $(JIT_PROCESSES) --calls 200000 --require-all

outage: deps-outage $(call MODULE,luajit)
	@$(RECORD) start $(BUILD)/results-outage.md "make outage"
	@$(RECORD) run $(BUILD)/results-outage.md \
	  "Retry storms: the outage matrix and the bad days" "$(OUTAGE)"
	@$(RECORD) run $(BUILD)/results-outage.md \
	  "The breaker at fleet scale (1,000 hosts, backoff.fleet)" \
	  "$(FLEET_MODEL)"
	@mv $(BUILD)/results-outage.md bench/results-outage.md
	@echo "figures written to bench/results-outage.md"

# worker CPU per request of a backoff.retry handler / a pcall handler in
# a real nginx (1 worker, wrk, 127.0.0.1)
bench-nginx: deps-bench-nginx $(call MODULE,luajit)
	@$(RECORD) start $(BUILD)/results-nginx.md "make bench-nginx"
	@$(RECORD) run $(BUILD)/results-nginx.md "backoff.retry in a real nginx" \
	  "timeout 300 lua5.4 bench/nginx.lua $(CURDIR)"
	@mv $(BUILD)/results-nginx.md bench/results-nginx.md
	@echo "figures written to bench/results-nginx.md"

# hedging against a slow tail: an upstream of 2 ms with a seeded 5% at
# 200 ms, then one slow for everyone; p50, p99, p99.9 of an open-loop
# load and the upstream's extra requests (two nginx on 127.0.0.1)
bench-hedge: deps-bench-hedge $(call MODULE,luajit)
	@$(RECORD) start $(BUILD)/results-hedge.md "make bench-hedge"
	@$(RECORD) run $(BUILD)/results-hedge.md "Hedged requests in a real nginx" \
	  "timeout 600 lua5.4 bench/hedge.lua $(CURDIR)"
	@mv $(BUILD)/results-hedge.md bench/results-hedge.md
	@echo "figures written to bench/results-hedge.md"

# the herd again, by bench/herd_reference.py: the blog's model written
# independently in Python, compared figure by figure with herd.lua's CSV
$(BUILD)/herd.csv: | deps-herd-reference $(call MODULE,luajit)
	@$(HERD)

herd-reference: deps-herd-reference $(BUILD)/herd.csv
	@$(RECORD) start $(BUILD)/results-herd.md "make herd-reference"
	@$(RECORD) run $(BUILD)/results-herd.md "The herd, independent model" \
	  "python3 bench/herd_reference.py --csv $(BUILD)/herd.csv"
	@mv $(BUILD)/results-herd.md bench/results-herd-reference.md
	@echo "figures written to bench/results-herd-reference.md"

clean:
	rm -rf $(BUILD) backoff csrc/*.o csrc/*.so
