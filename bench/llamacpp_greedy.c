/* bench/llamacpp_greedy.c - greedy tokens from llama.cpp for a prompt of
 * token ids, for bench/llamacpp.sh's check that day0 and llama.cpp run the
 * same model (built against the bundle's libllama).
 *
 *   llamacpp_greedy MODEL.gguf 1,42,7 K   ->  stdout "id,id,...": K ids
 *
 * The prompt goes in as ids (no tokenizer, no BOS added), one batch; then K
 * single-token decodes, each the argmax of the last logits (lowest index on
 * ties, as day0's `run --generate`).  The KV cache is f32 as day0's is, so
 * that the two differ only in the weights' arithmetic.  stderr: per step the
 * margin between the best and the second-best logit (a near tie explains a
 * bf16 divergence). */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
	(void)ud;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... K\n", argv[0]);
		return 2;
	}
	int k = atoi(argv[3]);
	llama_token prompt[4096];
	int n = 0;
	for (char *s = argv[2], *e; *s && n < 4096; s = *e ? e + 1 : e) {
		prompt[n++] = (llama_token)strtol(s, &e, 10);
		if (e == s) {
			fprintf(stderr, "llamacpp_greedy: bad token list '%s'\n", argv[2]);
			return 2;
		}
	}
	llama_log_set(quiet, NULL);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model) {
		fprintf(stderr, "llamacpp_greedy: cannot load %s\n", argv[1]);
		return 1;
	}
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)(n + k + 16);
	cp.n_batch = cp.n_ubatch = (uint32_t)n;
	cp.type_k = GGML_TYPE_F32;
	cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.no_perf = true;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llamacpp_greedy: cannot make a context\n");
		return 1;
	}
	int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
	for (int i = 0; i < n; i++)
		if (prompt[i] < 0 || prompt[i] >= nv) {
			fprintf(stderr, "llamacpp_greedy: token %d outside the vocabulary (%d)\n", prompt[i], nv);
			return 2;
		}
	struct llama_batch b = llama_batch_get_one(prompt, n);
	llama_token tok;
	for (int step = 0; step < k; step++) {
		if (llama_decode(ctx, b) != 0) {
			fprintf(stderr, "llamacpp_greedy: llama_decode failed at step %d\n", step);
			return 1;
		}
		const float *lg = llama_get_logits_ith(ctx, -1);
		int best = 0, second = -1;
		for (int v = 1; v < nv; v++) {
			if (lg[v] > lg[best]) {
				second = best;
				best = v;
			} else if (second < 0 || lg[v] > lg[second]) {
				second = v;
			}
		}
		fprintf(stderr, "step %d: token %d, margin %.6g\n", step, best, lg[best] - lg[second]);
		printf("%s%d", step ? "," : "", best);
		tok = best;
		b = llama_batch_get_one(&tok, 1);
	}
	printf("\n");
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return 0;
}
