# backoff -- build, demo and test.
#
#   make demo          build for Lua 5.4 and show the module at work
#   make test          build for 5.1 5.2 5.3 5.4 and LuaJIT, run every test
#   make               build the module for LUA_VERSION (default 5.4)
#   make LUA_VERSION=luajit    (or 5.1, 5.2, 5.3): that version's packages
#                      (interpreter, headers) are installed first
#   make bench         call costs (5.4, LuaJIT), the herd and the outage
#   make outage        retry storms: a full outage, with and without budget
#   make herd-reference  the herd re-run by an independent model (Python)
#   make fuzz          libFuzzer on the core (FUZZ_TIME=60 seconds)
#
# Missing Debian packages are installed (as root) or named (otherwise)
# by .ci/deps.  The module never links liblua: the interpreter that
# loads it provides the Lua API.

LUA_VERSIONS := 5.1 5.2 5.3 5.4 luajit
LUA_VERSION ?= 5.4

CC      ?= cc
CFLAGS  ?= -O2 -g
LIBFLAG ?= -shared
WARN    := -std=c99 -pedantic -Wall -Wextra -Wshadow -Wundef -Wcast-qual \
           -Wcast-align -Wwrite-strings -Wstrict-prototypes \
           -Wmissing-prototypes -Wmissing-declarations -Wredundant-decls \
           -Wdouble-promotion -Wdeclaration-after-statement
BUILD   := build
# the core (no Lua) and the binding; the retry budget is part of both
CORE_SRC    := csrc/backoff.c csrc/backoff_options.c csrc/backoff_budget.c
BINDING_SRC := csrc/lbackoff.c csrc/lbackoff_options.c csrc/lbackoff_env.c \
               csrc/lbackoff_msg.c csrc/lbackoff_ffi.c csrc/lbudget.c
CORE    := $(CORE_SRC) csrc/backoff.h csrc/backoff_budget.h
BINDING := $(BINDING_SRC) csrc/lbackoff.h csrc/lbudget.h

# interpreter and headers of one version
lua_bin = $(if $(filter luajit,$1),luajit,lua$1)
lua_inc = $(if $(filter luajit,$1),/usr/include/luajit-2.1,/usr/include/lua$1)
lua_dev = $(if $(filter luajit,$1),luajit2 libluajit2-5.1-dev,$(if $(filter 5.1,$1),lua5.1 liblua5.1-0-dev,lua$1 liblua$1-dev))

ifeq ($(filter $(LUA_VERSION),$(LUA_VERSIONS)),)
$(error LUA_VERSION=$(LUA_VERSION): use one of $(LUA_VERSIONS))
endif

BUILD_PKGS := gcc libc6-dev $(call lua_dev,$(LUA_VERSION))
# luarocks too, so that README's `luarocks --lua-version 5.4 make` works
DEMO_PKGS := gcc libc6-dev $(call lua_dev,5.4) luarocks
TEST_PKGS := gcc libc6-dev $(foreach v,$(LUA_VERSIONS),$(call lua_dev,$(v))) \
             lua-busted lua-check lua-socket luarocks libcmocka-dev \
             valgrind clang libclang-rt-dev nginx libnginx-mod-http-lua \
             python3-prometheus-client

MODULE = $(BUILD)/$(1)/backoff/core.so
# run Lua code against the build of version $(1)
LUA_ENV = LUA_PATH='./lua/?.lua;;' LUA_CPATH='./$(BUILD)/$(1)/?.so;;'

.PHONY: ctest-budget nginx-fleet
.PHONY: all demo test ctest lint clean deps-build deps-demo deps-test print rock-test core-alone \
        asan-busted valgrind allocfail forged fuzz threads bench herd-reference

all: deps-build $(call MODULE,$(LUA_VERSION))

$(BUILD)/%/backoff/core.so: $(CORE) $(BINDING)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -fvisibility=hidden -I$(call lua_inc,$*) \
	  -Icsrc -o $@ $(CORE_SRC) $(BINDING_SRC) $(LIBFLAG) -lm

# the module with ASan + UBSan (float-cast-overflow on), for PUC Lua
$(BUILD)/asan-%/backoff/core.so: $(CORE) $(BINDING)
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -fPIC -I$(call lua_inc,$*) \
	  -Icsrc -o $@ $(CORE_SRC) $(BINDING_SRC) -shared -lm

deps-build:
	@sh .ci/deps $(BUILD_PKGS)

deps-demo:
	@sh .ci/deps $(DEMO_PKGS)

deps-test:
	@sh .ci/deps $(TEST_PKGS)

demo: deps-demo $(call MODULE,5.4)
	@$(call LUA_ENV,5.4) lua5.4 examples/demo.lua

print:
	@echo "LUA_VERSION=$(LUA_VERSION) CC=$(CC) CFLAGS=$(CFLAGS)"
	@echo "module: $(call MODULE,$(LUA_VERSION))"

# ---- tests ---------------------------------------------------------

TAP_DIR := $(BUILD)/tap
SUITE   := TAP_DIR=$(TAP_DIR) sh spec/run-suite
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer

test: deps-test $(foreach v,$(LUA_VERSIONS),$(call MODULE,$(v)))
	@rm -rf $(TAP_DIR)
	@$(SUITE) core-without-lua $(MAKE) -s core-alone
	@$(SUITE) c-core $(MAKE) -s ctest
	@$(SUITE) c-budget $(MAKE) -s ctest-budget
	@for v in $(LUA_VERSIONS); do \
	  case $$v in luajit) lua=luajit ;; *) lua=lua$$v ;; esac; \
	  $(SUITE) busted-$$v $$lua /usr/bin/busted \
	    --lpath='./lua/?.lua' --cpath="./$(BUILD)/$$v/?.so" -o TAP spec; \
	done
	@BACKOFF_NO_FFI=1 $(SUITE) busted-luajit-noffi luajit /usr/bin/busted \
	  --lpath='./lua/?.lua' --cpath="./$(BUILD)/luajit/?.so" -o TAP spec
	@for v in 5.1 5.4 luajit; do \
	  $(SUITE) asan-busted-$$v $(MAKE) -s asan-busted V=$$v; done
	@for v in 5.1 5.4 luajit; do \
	  $(SUITE) valgrind-$$v $(MAKE) -s valgrind V=$$v; done
	@$(SUITE) allocfail $(MAKE) -s allocfail
	@$(SUITE) forged $(MAKE) -s forged
	@$(SUITE) fuzz $(MAKE) -s fuzz FUZZ_TIME=20
	@$(SUITE) threads $(MAKE) -s threads
	@$(SUITE) nginx timeout 300 lua5.4 spec/nginx/run.lua $(CURDIR)
	@$(SUITE) nginx-fleet timeout 120 lua5.4 spec/nginx/fleet.lua $(CURDIR)
	@$(SUITE) nginx-http timeout 120 lua5.4 spec/nginx/http.lua $(CURDIR)
	@$(SUITE) nginx-balancer timeout 300 lua5.4 spec/nginx/balancer.lua \
	  $(CURDIR)
	@$(SUITE) luarocks-make $(MAKE) -s rock-test
	@$(SUITE) luacheck $(MAKE) -s lint
	@sh spec/tap-summary $(TAP_DIR)

# the core must build with no Lua include path at all
core-alone:
	@mkdir -p $(BUILD)
	@for f in $(CORE_SRC); do \
	  $(CC) $(WARN) -Werror -c $$f -o $(BUILD)/alone.o || exit 1; \
	  echo "ok - $$f builds with -std=c99 -pedantic -Werror and no Lua headers"; \
	done

# C tests of the core (cmocka, TAP output) under ASan and UBSan
$(BUILD)/test_backoff: spec/c/test_backoff.c $(CORE)
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -Icsrc -o $@ \
	  spec/c/test_backoff.c $(CORE_SRC) -lcmocka -lm

ctest: $(BUILD)/test_backoff
	@CMOCKA_MESSAGE_OUTPUT=TAP $(BUILD)/test_backoff

# C tests of the budget core (cmocka, TAP) under ASan and UBSan
$(BUILD)/test_budget: spec/c/test_budget.c csrc/backoff_budget.c csrc/backoff_budget.h
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror $(SANITIZE) -Icsrc -o $@ \
	  spec/c/test_budget.c csrc/backoff_budget.c -lcmocka

ctest-budget: $(BUILD)/test_budget
	@CMOCKA_MESSAGE_OUTPUT=TAP $(BUILD)/test_budget

# the other build path: `luarocks make` into a private tree, then the
# specs against the installed rock only (run from a copy with no lua/,
# build/ or .busted, so nothing from this tree can be picked up)
ROCK := $(BUILD)/rock
rock-test:
	@for f in $(CORE_SRC) $(BINDING_SRC) $$(find lua -name '*.lua'); do \
	  grep -q "\"$$f\"" rockspec/*.rockspec || \
	  { echo "not ok - the rockspec does not install $$f"; exit 1; }; done; \
	  echo "ok - the rockspec has every C source and Lua module of the tree"
	@rm -rf $(ROCK) && mkdir -p $(ROCK)/src $(ROCK)/run
	@cp -r csrc lua bin rockspec $(ROCK)/src/ && cp -r spec doc $(ROCK)/run/
	@cd $(ROCK)/src && luarocks make --tree ../tree >../make.log 2>&1 \
	  || { cat ../make.log; exit 1; }
	@cd $(ROCK)/run && eval "$$(luarocks path --tree ../tree)" && \
	  test -f ../tree/lib/lua/5.1/backoff/core.so && \
	  test -f ../tree/share/lua/5.1/backoff.lua && \
	  echo "ok - luarocks make installed backoff into a tree" && \
	  test "$$(../tree/bin/backoff-delays -a LIMD --initial-delay 2 \
	    --min-delay 1 --delay-increment-on-failure 4 \
	    --delay-multiple-on-success 0.2 0 0 0 1 1 1 0 0 0 | tr '\n' ' ')" \
	    = "2 6 10 2 1 1 5 9 13 " && \
	  echo "ok - the installed backoff-delays prints the LIMD example" && \
	  lua5.1 /usr/bin/busted -o TAP spec && \
	  luajit /usr/bin/busted -o TAP spec/12-ffi_spec.lua
	@cd $(ROCK)/src && luarocks --lua-version 5.4 make --tree ../tree \
	  >../make54.log 2>&1 || { cat ../make54.log; exit 1; }
	@cd $(ROCK)/run && \
	  eval "$$(luarocks --lua-version 5.4 path --tree ../tree)" && \
	  lua5.4 -e 'b = require "backoff"' \
	    -e 'p = package.searchpath("backoff.core", package.cpath)' \
	    -e 'assert(p:find("tree/lib/lua/5.4/", 1, true), p)' \
	    -e 'assert(b.exponential{initial_delay = 1}:failure(0) == 1)' && \
	  grep -q 'lua5\.4' ../tree/bin/backoff-delays && \
	  grep -q 'lua5\.1' ../tree/bin/backoff-delays~ && \
	  echo "ok - luarocks --lua-version 5.4 make: lua5.4 loads the rock;" \
	    "backoff-delays now runs lua5.4, the 5.1 one is kept as backoff-delays~"

# the whole busted suite against the sanitizer build (LD_PRELOAD puts
# the ASan runtime first, as a plain lua binary is not instrumented)
ASAN_RT = $(shell $(CC) -print-file-name=libasan.so)
asan-busted: $(BUILD)/asan-$(V)/backoff/core.so
	@LD_PRELOAD=$(ASAN_RT) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(call lua_bin,$(V)) /usr/bin/busted --lpath='./lua/?.lua' \
	  --cpath='./$(BUILD)/asan-$(V)/?.so' -o TAP spec

# valgrind over the smoke script (V = 5.1, 5.4 or luajit)
valgrind: $(call MODULE,$(V))
	@$(call LUA_ENV,$(V)) valgrind -q --error-exitcode=1 --leak-check=full \
	  --errors-for-leak-kinds=definite,indirect --track-origins=yes \
	  $(call lua_bin,$(V)) spec/valgrind_smoke.lua \
	  && echo "ok - valgrind: no error, no leak ($(call lua_bin,$(V)))"

# C programs hosting Lua 5.4 with the module linked in, under ASan+UBSan
LUA_HOSTS := $(BUILD)/allocfail $(BUILD)/forged
$(LUA_HOSTS): $(BUILD)/%: spec/c/%.c $(CORE) $(BINDING)
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
$(BUILD)/fuzz_backoff: spec/fuzz/fuzz_backoff.c $(CORE)
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
$(BUILD)/threads: spec/c/threads.c $(CORE)
	@mkdir -p $(@D)
	$(CC) -O1 -g $(WARN) -Werror -fsanitize=thread -pthread -Icsrc -o $@ \
	  spec/c/threads.c $(CORE_SRC) -lm

threads: $(BUILD)/threads
	@TSAN_OPTIONS=halt_on_error=1 $(BUILD)/threads

# ---- benchmarks (not part of make test) ----------------------------

$(BUILD)/%/bench_empty.so: bench/empty.c
	@mkdir -p $(@D)
	$(CC) -O2 -std=c99 -fPIC -I$(call lua_inc,$*) -o $@ bench/empty.c $(LIBFLAG)

bench: deps-test $(call MODULE,5.4) $(call MODULE,luajit) \
       $(BUILD)/5.4/bench_empty.so $(BUILD)/luajit/bench_empty.so
	@$(call LUA_ENV,5.4) lua5.4 bench/bench.lua
	@echo
	@$(call LUA_ENV,luajit) luajit bench/bench.lua
	@echo
	@$(call LUA_ENV,luajit) luajit bench/herd.lua --csv $(BUILD)/herd.csv \
	  --svg $(BUILD)/herd.svg
	@echo
	@$(call LUA_ENV,5.4) lua5.4 bench/deadline.lua
	@echo
	@$(OUTAGE)

# a full outage in virtual time (about 9 s of CPU): build/outage.csv, .svg
OUTAGE = $(call LUA_ENV,luajit) luajit bench/outage.lua \
	  --csv $(BUILD)/outage.csv --svg $(BUILD)/outage.svg
.PHONY: outage
outage: deps-test $(call MODULE,luajit)
	@$(OUTAGE)

# worker CPU per request of a backoff.retry handler / a pcall handler in
# a real nginx (1 worker, wrk, 127.0.0.1): `make bench-nginx`
.PHONY: bench-nginx
bench-nginx: deps-test $(call MODULE,luajit)
	@sh .ci/deps wrk
	@timeout 300 lua5.4 bench/nginx.lua $(CURDIR)

# the herd again, by bench/herd_reference.py: the blog's model written
# independently in Python, compared figure by figure with the CSV above
herd-reference:
	@sh .ci/deps python3
	@test -f $(BUILD)/herd.csv || $(MAKE) -s bench
	@python3 bench/herd_reference.py --csv $(BUILD)/herd.csv

lint:
	@luacheck -q --no-color lua spec examples bench bin/backoff-delays && echo "ok - luacheck: no warnings"

clean:
	rm -rf $(BUILD) csrc/*.o csrc/*.so
