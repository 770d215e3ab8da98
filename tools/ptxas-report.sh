#!/usr/bin/env bash
# ptxas-report.sh - what ptxas says about every CUDA kernel of ops/cuda, per architecture:
# registers, spill stores and loads, stack frame, shared memory. With no GPU to time the kernels,
# this is the evidence that they compile to what was meant: a spill or a stack frame shows here.
#   tools/ptxas-report.sh [--arch "80 90"] [--strict] [FILE.cu ...]
# --strict exits 1 when any kernel spills or has a stack frame. Needs nvcc (/usr/local/cuda/bin
# or PATH). Prints a table sorted by file, kernel (demangled when c++filt is here) and arch.
set -euo pipefail
cd "$(dirname "$0")/.."
archs="80 90"
strict=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) archs="$2"; shift 2 ;;
    --strict) strict=1; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "ptxas-report: nvcc not found (install the CUDA toolkit)" >&2; exit 2; }
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(ls ops/cuda/*.cu)
demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }
inc=(-I. -Igraph -Iops -Iops/nn -Ipasses -Iruntime -Iops/cuda -Iruntime/cuda/emu -I/usr/include)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-18s %-4s %5s %6s %6s %6s %7s  %s\n" file arch regs spillS spillL stack smem kernel
bad=0
for f in "${files[@]}"; do
  for a in $archs; do
    "$nvcc" -std=c++17 -O3 -arch="sm_$a" -Xptxas -v "${inc[@]}" -c "$f" -o "$tmp/k.o" 2>"$tmp/log" ||
      { cat "$tmp/log"; echo "ptxas-report: $f does not compile for sm_$a" >&2; exit 1; }
    # one record per entry function: name, then its stack/spills line, then its registers/smem line
    awk -v file="$(basename "$f")" -v arch="sm_$a" '
      /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2) }
      /bytes stack frame/ { stack = $1; ss = $5; sl = $9 }
      /Used [0-9]+ registers/ {
        regs = $5; smem = 0
        if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH) + 0
        print file, arch, regs, ss, sl, stack, smem, k
      }' "$tmp/log" >>"$tmp/rows"
  done
done
while read -r file arch regs ss sl stack smem kernel; do
  name=$(echo "$kernel" | demangle | sed 's/(anonymous namespace):://g' | cut -c1-70)
  flag=""
  if [ "$ss" != 0 ] || [ "$sl" != 0 ] || [ "$stack" != 0 ]; then flag="  <-- spills or stack"; bad=$((bad + 1)); fi
  printf "%-18s %-4s %5s %6s %6s %6s %7s  %s%s\n" "$file" "${arch#sm_}" "$regs" "$ss" "$sl" "$stack" "$smem" "$name" "$flag"
done < <(sort -k1,1 -k8,8 -k2,2 "$tmp/rows")
n=$(wc -l <"$tmp/rows")
echo "ptxas-report: $n kernel builds, $bad with spills or a stack frame"
[ "$strict" = 1 ] && [ "$bad" -gt 0 ] && exit 1
exit 0
