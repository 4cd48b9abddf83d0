/* config.json parsing (transformers defaults) and the tensor tables. */
#include "engine.h"
#include "unit.h"

#include <string.h>

static int load(const char *json, struct model_config *c, struct d0_err *err)
{
	json_error_t je;
	json_t *root = json_loads(json, 0, &je);
	int rc = model_config_from_json(root, "config.json", c, err);
	json_decref(root);
	return rc;
}

static int has(const struct tensor_spec *t, size_t n, const char *name,
	       uint64_t d0, uint64_t d1)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return t[i].shape[0] == d0 && t[i].shape[1] == d1;
	return 0;
}

int main(void)
{
	struct model_config c;
	struct d0_err err;
	struct tensor_spec *t;
	size_t n;

	/* llama: kv heads default to heads, head_dim to hidden/heads */
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96}",
		   &c, &err) == 0);
	CHECK(c.kv_heads == 4 && c.head_dim == 16 && !c.tie_embeddings);
	CHECK(c.rms_eps == 1e-6 && c.rope_theta == 10000.0);
	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	CHECK(n == 1 + 2 * 9 + 2); /* embed, 9 per layer, norm, lm_head */
	CHECK(has(t, n, "model.layers.1.mlp.down_proj.weight", 64, 96));
	free(t);
	model_config_free(&c);

	/* qwen3: head_dim defaults to 128 (not hidden/heads); q/k norms */
	CHECK(load("{\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":100,"
		   "\"intermediate_size\":96,\"tie_word_embeddings\":true}", &c, &err) == 0);
	CHECK(c.head_dim == 128);
	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	CHECK(has(t, n, "model.layers.0.self_attn.q_proj.weight", 512, 64));
	CHECK(has(t, n, "model.layers.0.self_attn.k_norm.weight", 128, 0));
	CHECK(!has(t, n, "lm_head.weight", 100, 64)); /* tied */
	free(t);
	model_config_free(&c);

	/* mixtral: num_key_value_heads defaults to 8, eps 1e-5, theta 1e6 */
	CHECK(load("{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":8,\"vocab_size\":100,\"intermediate_size\":96,"
		   "\"num_local_experts\":3,\"head_dim\":null}", &c, &err) == 0);
	CHECK(c.kv_heads == 8 && c.head_dim == 8 && c.rms_eps == 1e-5 &&
	      c.rope_theta == 1e6 && c.experts == 3 && c.top_k == 2);
	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	CHECK(has(t, n, "model.layers.0.block_sparse_moe.experts.2.w2.weight", 64, 96));
	CHECK(has(t, n, "model.layers.0.block_sparse_moe.gate.weight", 3, 64));
	free(t);
	model_config_free(&c);

	/* qwen2_moe: num_key_value_heads defaults to 16, not to heads */
	CHECK(load("{\"model_type\":\"qwen2_moe\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":32,\"vocab_size\":100,\"intermediate_size\":96}",
		   &c, &err) == 0);
	CHECK(c.kv_heads == 16 && c.head_dim == 2 && c.experts == 60);
	model_config_free(&c);

	/* qwen2_moe: qkv biases, sparse step and mlp_only_layers */
	CHECK(load("{\"model_type\":\"qwen2_moe\",\"hidden_size\":64,\"num_hidden_layers\":4,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":100,"
		   "\"intermediate_size\":96,\"num_experts\":4,\"moe_intermediate_size\":32,"
		   "\"shared_expert_intermediate_size\":48,\"decoder_sparse_step\":2,"
		   "\"mlp_only_layers\":[3]}", &c, &err) == 0);
	CHECK(!model_layer_is_moe(&c, 0) && model_layer_is_moe(&c, 1));
	CHECK(!model_layer_is_moe(&c, 2) && !model_layer_is_moe(&c, 3));
	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	CHECK(has(t, n, "model.layers.0.self_attn.q_proj.bias", 64, 0));
	CHECK(has(t, n, "model.layers.1.mlp.shared_expert_gate.weight", 1, 64));
	CHECK(has(t, n, "model.layers.1.mlp.experts.3.down_proj.weight", 64, 32));
	CHECK(has(t, n, "model.layers.3.mlp.gate_proj.weight", 96, 64));
	free(t);
	model_config_free(&c);

	/* rope scaling */
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96,"
		   "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
		   "\"original_max_position_embeddings\":8192}}", &c, &err) == 0);
	CHECK(!strcmp(c.rope.type, "llama3") && c.rope.factor == 8.0 &&
	      c.rope.high_freq_factor == 4.0 && c.rope.original_max_pos == 8192);
	model_config_free(&c);

	/* errors name the key */
	CHECK(load("{\"model_type\":\"llama\",\"num_hidden_layers\":1}", &c, &err) == -1 &&
	      strstr(err.msg, "hidden_size"));
	CHECK(load("{\"model_type\":\"gpt9\"}", &c, &err) == -1 && strstr(err.msg, "gpt9"));
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"vocab_size\":100,"
		   "\"intermediate_size\":96}", &c, &err) == -1 &&
	      strstr(err.msg, "num_key_value_heads"));
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":\"64\",\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96}",
		   &c, &err) == -1 && strstr(err.msg, "'hidden_size' must be an integer"));
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96,"
		   "\"rope_scaling\":{\"rope_type\":\"spiral\",\"factor\":2.0}}", &c, &err) == 0);
	/* an unknown rope type is recorded: inspect reports it as a missing operator */
	CHECK(!strcmp(c.rope.type, "spiral"));
	model_config_free(&c);
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96,"
		   "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":0.5}}", &c, &err) == -1 &&
	      strstr(err.msg, "rope_scaling.factor"));

	/* transformers v5: rope_parameters carries rope_theta and the type */
	CHECK(load("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,"
		   "\"num_attention_heads\":4,\"vocab_size\":100,\"intermediate_size\":96,"
		   "\"rope_parameters\":{\"rope_theta\":500000.0,\"rope_type\":\"llama3\","
		   "\"factor\":8.0,\"original_max_position_embeddings\":8192}}", &c, &err) == 0);
	CHECK(c.rope_theta == 500000.0 && !strcmp(c.rope.type, "llama3") && c.rope.factor == 8.0);
	model_config_free(&c);
	/* sliding windows per layer: qwen2 from max_window_layers on */
	CHECK(load("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_hidden_layers\":4,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":null,\"vocab_size\":100,"
		   "\"intermediate_size\":96,\"use_sliding_window\":true,\"sliding_window\":8,"
		   "\"max_window_layers\":2}", &c, &err) == 0);
	CHECK(c.kv_heads == 4); /* null: the head count */
	CHECK(model_layer_window(&c, 1) == 0 && model_layer_window(&c, 2) == 8);
	model_config_free(&c);
	/* DeepSeek: attention_bias adds q_a/kv_a/o biases; scoring_func is ignored */
	CHECK(load("{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":2,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":100,"
		   "\"intermediate_size\":96,\"q_lora_rank\":16,\"kv_lora_rank\":8,"
		   "\"qk_rope_head_dim\":8,\"qk_nope_head_dim\":8,\"v_head_dim\":8,"
		   "\"n_routed_experts\":8,\"n_group\":4,\"topk_group\":2,\"num_experts_per_tok\":2,"
		   "\"moe_intermediate_size\":16,\"first_k_dense_replace\":1,\"moe_layer_freq\":2,"
		   "\"scoring_func\":\"softmax\",\"attention_bias\":true}", &c, &err) == 0);
	CHECK(!strcmp(c.scoring, "sigmoid") && model_layer_is_moe(&c, 1));
	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	CHECK(has(t, n, "model.layers.0.self_attn.q_a_proj.bias", 16, 0) &&
	      has(t, n, "model.layers.0.self_attn.kv_a_proj_with_mqa.bias", 16, 0) &&
	      has(t, n, "model.layers.1.self_attn.o_proj.bias", 64, 0));
	free(t);
	model_config_free(&c);

	/* gen-model's writer and the parser agree */
	CHECK(load("{\"model_type\":\"qwen2_moe\",\"hidden_size\":64,\"num_hidden_layers\":2,"
		   "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":100,"
		   "\"intermediate_size\":96,\"num_experts\":4,\"moe_intermediate_size\":32}", &c, &err) == 0);
	{
		json_t *j = model_config_to_json(&c);
		struct model_config c2;
		CHECK(model_config_from_json(j, "x", &c2, &err) == 0);
		CHECK(c2.experts == 4 && c2.moe_ffn == 32 && c2.attention_bias == 1 &&
		      c2.kv_heads == c.kv_heads && c2.shared_ffn == c.shared_ffn);
		CHECK(json_is_true(json_object_get(j, "qkv_bias")));
		CHECK(json_object_get(j, "head_dim") == NULL);
		model_config_free(&c2);
		json_decref(j);
	}
	model_config_free(&c);
	return unit_done();
}
