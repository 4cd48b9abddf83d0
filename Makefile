# day0 - release-day operations console for giant open models.
#
#   make demo      install dependencies, build, run the pipeline on a generated model
#   make test      install dependencies, build, run every test
#   make asan      AddressSanitizer + UBSan build running the same tests
#   make bench     benchmarks (ratios against references measured in the same run)
#   make fuzz      libFuzzer targets (clang)
#   make install PREFIX=/usr/local
#
# Build outputs go to $(BUILD) (build/ or build-asan/).

PREFIX ?= /usr/local
BUILD ?= build
SAN ?= 0
CC ?= cc

DEB_PKGS := build-essential pkg-config libncurses-dev libssh2-1-dev \
	libjansson-dev libsqlite3-dev sqlite3 libopenblas-dev libopenmpi-dev \
	openmpi-bin libssl-dev openssh-server openssh-client tmux clang \
	libclang-rt-14-dev time python3 procps strace \
	libpcre2-dev libutf8proc-dev nodejs npm libmicrohttpd-dev \
	libcurl4-openssl-dev curl apache2-utils jq openssl chromium \
	clustershell cmake git python3-numpy python3-yaml \
	libdnnl-dev libpng-dev libjpeg62-turbo-dev python3-pil
# Packages a command on PATH already satisfies: nodesource's nodejs ships its
# own npm and conflicts with Debian's npm package.
DEB_BY_COMMAND := npm

WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS ?= -O2 -g
ifeq ($(SAN),1)
CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
# MPI and OpenBLAS flags come from their own tools; `test`/`demo` re-enter
# make after `deps`, so these see freshly installed packages.
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
PCRE2_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS := $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
# HTTP: libmicrohttpd serves (`serve`), libcurl drives (`load`, `probe`).
HTTP_CFLAGS := $(shell pkg-config --cflags libmicrohttpd libcurl 2>/dev/null)
HTTP_LIBS := $(shell pkg-config --libs libmicrohttpd libcurl 2>/dev/null || echo -lmicrohttpd -lcurl)
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -pthread \
	$(MPI_CFLAGS) $(BLAS_CFLAGS) $(PCRE2_CFLAGS) $(HTTP_CFLAGS)
# The allowed arrows between modules, as include paths: engine/ is the
# ground (errors, protocol, weights, model, runtime) and sees nothing above
# it; store/ builds on engine/; agent/ and tui/ build on engine/ (tui also
# on store/); nothing but agent/ itself sees agent/.  tests/sh/test_modules.sh
# holds the sources to the same arrows.
# engine/ is one module in sub-folders (formats/, kernels/, model/,
# runtime/, ref/, serve/, text/, steps/, ...: docs/architecture.md); each
# sub-folder is on the include path of everything that may see engine/.
ENGINE_DIRS := engine $(patsubst %/,%,$(wildcard engine/*/))
ENGINE_INC := $(addprefix -I,$(ENGINE_DIRS))
INC_engine := $(ENGINE_INC)
INC_store := $(ENGINE_INC) -Istore
INC_agent := $(ENGINE_INC) -Iagent
INC_tui := $(ENGINE_INC) -Istore -Itui
INC_tests := $(ENGINE_INC) -Istore -Iagent -Itui
module_of = $(firstword $(subst /, ,$(patsubst $(BUILD)/%,%,$(1))))
LIBS := -lsqlite3 -lssh2 -lncursesw -ljansson -lcrypto $(PCRE2_LIBS) -lutf8proc $(HTTP_LIBS) $(MPI_LIBS) \
	-lpng -ljpeg \
	$(BLAS_LIBS) -ldnnl -lgomp -lpthread -lm -ldl
HEADERS := $(wildcard $(addsuffix /*.h,$(ENGINE_DIRS)) store/*.h agent/*.h tui/*.h)

# One static library per module folder (its *.c but main.c); a folder's
# main.c is its program.  Link order: dependents before what they use.
lib_src = $(filter-out $(1)/main.c,$(wildcard $(1)/*.c $(1)/*/*.c))
lib_of = $(if $(call lib_src,$(1)),$(BUILD)/libday0$(1).a)
ENGINE_LIB := $(BUILD)/libday0engine.a
MODULE_LIBS := $(call lib_of,tui) $(call lib_of,agent) $(call lib_of,store) $(ENGINE_LIB)
ENGINE_SRC := $(call lib_src,engine)
BINS := $(BUILD)/day0-engine $(if $(wildcard agent/main.c),$(BUILD)/day0-agent) \
	$(if $(wildcard tui/main.c),$(BUILD)/day0)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BINS := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tests/%)

.PHONY: all deps build test check asan bench demo fuzz install clean format

all: build

build: $(BINS) $(UNIT_BINS) $(TOOL_BINS)

# Installs every system package the project needs; quiet when all are there.
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  case " $(DEB_BY_COMMAND) " in *" $$p "*) command -v $$p >/dev/null && continue;; esac; \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	fi

# V=1 shows the full commands.
Q := $(if $(V),,@)

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(INC_$(call module_of,$@)) -c -o $@ $<

define module_lib
$(BUILD)/libday0$(1).a: $(patsubst %.c,$(BUILD)/%.o,$(call lib_src,$(1)))
	@rm -f $$@
	$(Q)ar rcs $$@ $$^
endef
$(foreach m,engine store agent tui,$(if $(call lib_src,$(m)),$(eval $(call module_lib,$(m)))))

# The build id (docs/compat.md): a SHA-256 of the engine's and the agent's
# sources (what runs on a node), 12 hex digits, "unknown" without sha256sum.
# build_id.txt is rewritten only when the id changes, so only build_id.o
# recompiles; facts.compat compares it across nodes.
BUILD_ID_SRC := $(sort $(wildcard $(addsuffix /*.[ch],$(ENGINE_DIRS)) agent/*.[ch]))
BUILD_ID := $(or $(shell cat $(BUILD_ID_SRC) 2>/dev/null | sha256sum 2>/dev/null | cut -c1-12),unknown)
$(BUILD)/build_id.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(BUILD_ID)' >$@.tmp; cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
$(BUILD)/engine/build_id.o: $(BUILD)/build_id.txt
$(BUILD)/engine/build_id.o: ALL_CFLAGS += -DDAY0_BUILD_ID='"$(BUILD_ID)"'
.PHONY: FORCE
FORCE:

$(BUILD)/day0-engine: $(BUILD)/engine/main.o $(ENGINE_LIB)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/day0-agent: $(BUILD)/agent/main.o $(MODULE_LIBS)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/day0: $(BUILD)/tui/main.o $(MODULE_LIBS)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(MODULE_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(INC_tests) -Itests/unit $(LDFLAGS) -o $@ $< $(MODULE_LIBS) $(LIBS)

$(BUILD)/tests/%: tests/tools/%.c $(MODULE_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(INC_tests) $(LDFLAGS) -o $@ $< $(MODULE_LIBS) $(LIBS)

# `test` and `demo` install dependencies first, then re-enter make so the
# build sees the freshly installed tools.
test: deps
	@$(MAKE) --no-print-directory check

check: build
	@BUILD=$(BUILD) bash tests/run.sh

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=1 check

FUZZ_BIN := build/fuzz/fuzz_safetensors
FUZZ_PROTO_BIN := build/fuzz/fuzz_proto
FUZZ_INV_BIN := build/fuzz/fuzz_inventory
FUZZ_PB_BIN := build/fuzz/fuzz_playbook
FUZZ_IMG_BIN := build/fuzz/fuzz_image
fuzz: deps
	@$(MAKE) --no-print-directory $(FUZZ_BIN) $(FUZZ_PROTO_BIN) \
	  $(FUZZ_INV_BIN) $(FUZZ_PB_BIN) $(FUZZ_IMG_BIN)
	@mkdir -p build/fuzz/corpus build/fuzz/corpus-proto \
	  build/fuzz/corpus-inventory build/fuzz/corpus-playbook \
	  build/fuzz/corpus-image
	$(FUZZ_BIN) -max_total_time=$${FUZZ_SECONDS:-60} build/fuzz/corpus tests/corpus
	$(FUZZ_PROTO_BIN) -max_total_time=$${FUZZ_SECONDS:-60} \
	  -dict=tests/fuzz/proto.dict build/fuzz/corpus-proto tests/fuzz/proto-corpus
	$(FUZZ_INV_BIN) -max_total_time=$${FUZZ_SECONDS:-60} \
	  -dict=tests/fuzz/inventory.dict build/fuzz/corpus-inventory \
	  tests/fuzz/inventory-corpus
	$(FUZZ_PB_BIN) -max_total_time=$${FUZZ_SECONDS:-60} \
	  -dict=tests/fuzz/playbook.dict build/fuzz/corpus-playbook \
	  tests/fuzz/playbook-corpus
	$(FUZZ_IMG_BIN) -runs=$${FUZZ_IMAGE_RUNS:-1000000} \
	  -max_total_time=$${FUZZ_IMAGE_SECONDS:-600} -max_len=4096 \
	  -dict=tests/fuzz/image.dict build/fuzz/corpus-image \
	  tests/fuzz/image-corpus

# The fuzz targets share one set of instrumented objects (build/fuzz/obj/),
# so the second target of a run only links, and `make -j` compiles them in
# parallel.
FUZZ_CC := clang -std=c11 -D_GNU_SOURCE -g -O1
FUZZ_OBJ := build/fuzz/obj
fuzz_objs = $(patsubst %.c,$(FUZZ_OBJ)/%.o,$(1))
$(FUZZ_OBJ)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(ENGINE_INC) -Itui -fsanitize=fuzzer-no-link,address,undefined \
	  $(MPI_CFLAGS) $(BLAS_CFLAGS) $(PCRE2_CFLAGS) $(HTTP_CFLAGS) -c -o $@ $<
fuzz_link = @mkdir -p $(dir $@); \
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LIBS)

$(FUZZ_BIN): $(call fuzz_objs,tests/fuzz/fuzz_safetensors.c $(ENGINE_SRC))
	$(fuzz_link)

# The wire protocol's line parsers and the store's JSON scanner (which it
# holds to jansson's verdicts); util.c brings d0_errf.
$(FUZZ_PROTO_BIN): $(call fuzz_objs,tests/fuzz/fuzz_proto.c engine/proto.c \
		engine/json_scan.c engine/util.c)
	$(fuzz_link)

# The inventory parser (engine/model/inventory.c and util.c) and the playbook
# parser (tui/playbook.c, which names the engine's steps: the engine).
$(FUZZ_INV_BIN): $(call fuzz_objs,tests/fuzz/fuzz_inventory.c \
		engine/model/inventory.c engine/util.c)
	$(fuzz_link)

$(FUZZ_PB_BIN): $(call fuzz_objs,tests/fuzz/fuzz_playbook.c tui/playbook.c \
		$(ENGINE_SRC))
	$(fuzz_link)

# The image loading wrapper (libpng, libjpeg-turbo) and the resampler.
$(FUZZ_IMG_BIN): $(call fuzz_objs,tests/fuzz/fuzz_image.c \
		engine/image/image_decode.c engine/image/image_resize.c \
		engine/util.c)
	$(fuzz_link)

bench: deps
	@$(MAKE) --no-print-directory build
	bash bench/weights.sh
	bash bench/comm.sh
	bash bench/store.sh
	bash bench/forward.sh
	bash bench/fanout.sh
	bash bench/fleet.sh
	bash bench/tui.sh
	bash bench/resume_soak.sh
	bash bench/serve.sh
	bash bench/llamacpp.sh
	bash bench/image.sh

demo: deps
	@$(MAKE) --no-print-directory build
	@$(BUILD)/day0 demo

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/day0/playbooks
	install -m 0644 playbooks/*.json $(DESTDIR)$(PREFIX)/share/day0/playbooks/

format:
	clang-format -i engine/*.[ch] engine/*/*.[ch] tests/unit/*.c tests/tools/*.c

clean:
	rm -rf build build-asan
