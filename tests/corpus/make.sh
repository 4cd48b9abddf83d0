#!/usr/bin/env bash
# Generates the bad-input corpus for `day0-engine verify FILE`: small
# safetensors files, each breaking one rule, plus MANIFEST with one line per
# case: FILE <tab> EXIT CODE <tab> MESSAGE SUBSTRING.  For exit 1 or 2 the
# substring must appear on stderr (after "day0-engine: FILE: "), for exit 0
# on stdout.  Pure bash + printf + head: byte-for-byte reproducible.
#
#   bash tests/corpus/make.sh [OUT_DIR]     (default: this directory)
#
# Commit both this script and what it writes; tests/sh/test_corpus.sh checks
# that the committed files still match it.  The files also seed the fuzzer.
set -eu
export LC_ALL=C # ${#s} counts bytes, printf writes bytes
dir=${1:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$dir"
manifest="$dir/MANIFEST"
: >"$manifest"
rm -f "$dir"/*.safetensors

# Write the 8-byte little-endian header length.
le64() {
	local n=$1 i
	for ((i = 0; i < 8; i++)); do
		printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"
	done
}

# case NAME RC MESSAGE HEADER DATA_BYTES [LENGTH_FIELD [TOTAL_FILE_BYTES]]
# Writes NAME.safetensors: length field (default: the header's byte length),
# the header bytes, DATA_BYTES zero bytes; cut to TOTAL_FILE_BYTES if given.
case_() {
	local name=$1 rc=$2 msg=$3 hdr=$4 data=$5
	local n=${6:-${#hdr}}
	local f="$dir/$name.safetensors"
	{
		le64 "$n"
		printf '%s' "$hdr"
		head -c "$data" /dev/zero
	} >"$f"
	if [ $# -ge 7 ]; then
		truncate -s "$7" "$f"
	fi
	printf '%s\t%s\t%s\n' "$name.safetensors" "$rc" "$msg" >>"$manifest"
}

# raw NAME RC MESSAGE BYTES: the file is exactly the printf-escaped BYTES.
raw() {
	printf "$4" >"$dir/$1.safetensors"
	printf '%s\t%s\t%s\n' "$1.safetensors" "$2" "$3" >>"$manifest"
}

T4='{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'

# ---- valid controls (the parser must keep accepting these) --------------
case_ ok-empty-header 0 'ok: 0 tensors' '{}' 0
case_ ok-one-tensor 0 'ok: 1 tensors' "{\"w\":$T4}" 4
case_ ok-metadata-padded 0 'ok: 2 tensors' \
	'{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}        ' 16
case_ ok-zero-size-tensors 0 'ok: 3 tensors' \
	'{"e":{"dtype":"F16","shape":[0,7],"data_offsets":[0,0]},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"z":{"dtype":"I64","shape":[3,0],"data_offsets":[8,8]}}' 8

# ---- the 8-byte length prefix -------------------------------------------
raw empty-file 1 'file is 0 bytes, too short for the 8-byte header length' ''
raw seven-bytes 1 'file is 7 bytes, too short for the 8-byte header length' \
	'\x02\x00\x00\x00\x00\x00\x00'
raw zero-header-length 1 "header does not start with '{'" \
	'\x00\x00\x00\x00\x00\x00\x00\x00'
case_ header-length-absurd 1 \
	'header length 100000001 exceeds the 100000000-byte limit' '{}' 0 100000001
case_ header-length-max-u64 1 \
	'header length 18446744073709551615 exceeds the 100000000-byte limit' \
	'{}' 0 -1
case_ header-length-at-limit 1 \
	'header length 100000000 runs past the end of the file (10 bytes)' \
	'{}' 0 100000000
case_ header-longer-than-file 1 \
	'header length 70 runs past the end of the file (72 bytes)' \
	"{\"w\":$T4}" 10 70
case_ header-off-by-one 1 \
	'header length 3 runs past the end of the file (10 bytes)' '{}' 0 3
# The file ends in the middle of the JSON header.
case_ truncated-header 1 \
	'header length 52 runs past the end of the file (30 bytes)' \
	"{\"w\":$T4}" 4 52 30
# The length prefix is consistent but the JSON inside it is cut short.
case_ truncated-json 1 'header is not valid JSON' \
	'{"w":{"dtype":"F32","shape":[1],"data_of' 4

# ---- the JSON header ------------------------------------------------------
case_ header-not-json 1 'header is not valid JSON' '{this is not json}' 0
case_ header-array 1 "header does not start with '{'" "[{\"w\":$T4}]" 4
case_ header-string 1 "header does not start with '{'" '"{}"' 0
case_ header-leading-space 1 "header does not start with '{'" ' {}' 0
case_ header-invalid-utf8 1 'header is not valid JSON: unable to decode byte 0xff' \
	$'{"w\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
case_ header-overlong-utf8 1 'header is not valid JSON: unable to decode byte 0xc0' \
	$'{"\xc0\xaf":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' 4
raw header-nul-byte 1 'header is not valid JSON' \
	'\x04\x00\x00\x00\x00\x00\x00\x00{}\x00 '
case_ header-trailing-garbage 1 'header is not valid JSON' '{} x' 0
case_ duplicate-tensor 1 "header is not valid JSON: duplicate object key near '\"w\"'" \
	"{\"w\":$T4,\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}" 8
case_ metadata-not-object 1 '__metadata__ is not an object' \
	'{"__metadata__":"pt"}' 0
case_ metadata-non-string 1 "__metadata__ value for 'format' is not a string" \
	'{"__metadata__":{"format":1}}' 0
case_ metadata-null-value 1 "__metadata__ value for 'note' is not a string" \
	'{"__metadata__":{"format":"pt","note":null}}' 0

# ---- one tensor entry -----------------------------------------------------
case_ entry-not-object 1 "tensor 'w': entry is not a JSON object" '{"w":4}' 4
case_ dtype-missing 1 "tensor 'w': missing or non-string dtype" \
	'{"w":{"shape":[1],"data_offsets":[0,4]}}' 4
case_ dtype-unknown 1 "tensor 'w': unknown dtype 'F33'" \
	'{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}' 4
case_ dtype-lowercase 1 "tensor 'w': unknown dtype 'f32'" \
	'{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}' 4
case_ shape-missing 1 "tensor 'w': missing or non-array shape" \
	'{"w":{"dtype":"F32","data_offsets":[0,4]}}' 4
case_ shape-negative 1 "tensor 'w': shape[1] is not a non-negative integer" \
	'{"w":{"dtype":"F32","shape":[1,-1],"data_offsets":[0,4]}}' 4
case_ shape-float 1 "tensor 'w': shape[0] is not a non-negative integer" \
	'{"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}' 4
case_ shape-string 1 "tensor 'w': shape[0] is not a non-negative integer" \
	'{"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}' 4
case_ shape-too-many-dims 1 "tensor 'w': 9 dimensions, at most 8 supported" \
	'{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}' 4
case_ shape-overflow 1 "tensor 'w': shape overflows" \
	'{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}' 4
case_ shape-bytes-overflow 1 "tensor 'w': byte size overflows" \
	'{"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}}' 4
case_ shape-too-big-integer 1 'header is not valid JSON: too big integer' \
	'{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,4]}}' 4
case_ offsets-three 1 "tensor 'w': data_offsets must be two non-negative integers" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}' 4
case_ offsets-one 1 "tensor 'w': data_offsets must be two non-negative integers" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}}' 4
case_ offsets-negative 1 "tensor 'w': data_offsets must be two non-negative integers" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}' 4
case_ offsets-strings 1 "tensor 'w': data_offsets must be two non-negative integers" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}}' 4
case_ offsets-missing 1 "tensor 'w': data_offsets must be two non-negative integers" \
	'{"w":{"dtype":"F32","shape":[1]}}' 4
case_ offsets-end-before-begin 1 "tensor 'w': data_offsets end 0 before begin 4" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}' 4
case_ size-mismatch 1 "tensor 'w': shape x F32 is 16 bytes but data_offsets span 15" \
	'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,15]}}' 15
case_ size-mismatch-dtype 1 "tensor 'w': shape x BF16 is 8 bytes but data_offsets span 16" \
	'{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}}' 16

# ---- how the ranges tile the data buffer ----------------------------------
case_ overlap 1 "tensor 'b': bytes 4..12 overlap tensor 'a'" \
	'{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}' 12
case_ overlap-same-range 1 "tensor 'b': bytes 0..4 overlap tensor 'a'" \
	'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}' 4
case_ overlap-zero-size-inside 1 "tensor 'z': bytes 4..4 overlap tensor 'a'" \
	'{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}' 8
case_ gap 1 "tensor 'b': gap of 4 bytes before it (starts at 8, previous data ends at 4)" \
	'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}' 12
case_ gap-at-start 1 "tensor 'w': gap of 4 bytes before it (starts at 4" \
	'{"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' 8
case_ offsets-out-of-range 1 "tensor 'w': data_offsets end 8 beyond the data buffer (4 bytes)" \
	'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 4
case_ offsets-huge 1 "tensor 'w': data_offsets end 9223372036854775807 beyond the data buffer (0 bytes)" \
	'{"w":{"dtype":"U8","shape":[9223372036854775807],"data_offsets":[0,9223372036854775807]}}' 0
case_ trailing-bytes 1 '4 trailing bytes after the last tensor (data ends at 4, buffer is 8 bytes)' \
	"{\"w\":$T4}" 8
case_ trailing-bytes-no-tensors 1 '3 trailing bytes after the last tensor' '{}' 3
