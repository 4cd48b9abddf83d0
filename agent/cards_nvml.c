/*
 * cards_nvml.c - NVIDIA GPUs through NVML, loaded with dlopen at run time
 * (as nvtop does), so the agent needs no driver to build or run: where
 * libnvidia-ml.so.1 is absent, init says so and the registry moves on to
 * CPU cards.  Only the handful of NVML calls the agent needs are declared
 * here, with the ABI NVML documents for them.
 */
#include "agent.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t; /* NVML_SUCCESS == 0 */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

struct nvml {
	void *lib;
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
	const char *(*error)(nvmlReturn_t);
	nvmlDevice_t *dev;
};

static const char *nvml_errstr(struct nvml *n, nvmlReturn_t r)
{
	static char buf[32];
	if (n->error)
		return n->error(r);
	snprintf(buf, sizeof buf, "NVML error %d", r);
	return buf;
}

static void nvml_unload(struct nvml *n)
{
	if (n->lib)
		dlclose(n->lib);
	free(n->dev);
	free(n);
}

static int nvml_init(struct cards *c, const struct agent_config *cfg,
		     struct d0_err *why)
{
	struct nvml *n = calloc(1, sizeof *n);
	unsigned int count = 0;
	nvmlReturn_t r;
	(void)cfg;
	if (!n)
		abort();
	n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		d0_errf(why, "libnvidia-ml.so.1 not loadable: %s", dlerror());
		nvml_unload(n);
		return -1;
	}
	/* POSIX allows converting dlsym's void * to a function pointer. */
#define SYM(field, name) *(void **)&n->field = dlsym(n->lib, name)
	SYM(init, "nvmlInit_v2");
	SYM(shutdown, "nvmlShutdown");
	SYM(count, "nvmlDeviceGetCount_v2");
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
	SYM(name, "nvmlDeviceGetName");
	SYM(memory, "nvmlDeviceGetMemoryInfo");
	SYM(error, "nvmlErrorString");
#undef SYM
	if (!n->init || !n->shutdown || !n->count || !n->handle || !n->name ||
	    !n->memory) {
		d0_errf(why, "libnvidia-ml.so.1 lacks the NVML calls needed");
		nvml_unload(n);
		return -1;
	}
	if ((r = n->init()) != 0) {
		d0_errf(why, "nvmlInit: %s", nvml_errstr(n, r));
		nvml_unload(n);
		return -1;
	}
	if ((r = n->count(&count)) != 0 || count == 0) {
		d0_errf(why, "no NVIDIA GPUs (%s)",
			r ? nvml_errstr(n, r) : "count 0");
		n->shutdown();
		nvml_unload(n);
		return -1;
	}
	n->dev = calloc(count, sizeof *n->dev);
	c->card = calloc(count, sizeof *c->card);
	if (!n->dev || !c->card)
		abort();
	for (unsigned int i = 0; i < count; i++) {
		nvmlMemory_t m = {0};
		if (n->handle(i, &n->dev[i]) != 0) {
			n->dev[i] = NULL;
			snprintf(c->card[i].name, sizeof c->card[i].name,
				 "GPU %u (no handle)", i);
			continue;
		}
		if (n->name(n->dev[i], c->card[i].name,
			    sizeof c->card[i].name) != 0)
			snprintf(c->card[i].name, sizeof c->card[i].name,
				 "GPU %u", i);
		if (n->memory(n->dev[i], &m) == 0)
			c->card[i].mem_bytes = m.total;
	}
	c->n = (int)count;
	c->priv = n;
	return 0;
}

static void nvml_shutdown(struct cards *c)
{
	struct nvml *n = c->priv;
	if (!n)
		return;
	n->shutdown();
	nvml_unload(n);
	c->priv = NULL;
}

static int nvml_refresh(struct cards *c, const struct rank_mem *ranks,
			size_t nranks)
{
	struct nvml *n = c->priv;
	(void)ranks;
	(void)nranks;
	for (int i = 0; i < c->n; i++) {
		nvmlMemory_t m;
		if (n->dev[i] && n->memory(n->dev[i], &m) == 0)
			c->card[i].used = m.used;
	}
	return 0;
}

const struct card_vendor card_vendor_nvml = {
    .name = "nvml",
    .init = nvml_init,
    .shutdown = nvml_shutdown,
    .refresh = nvml_refresh,
};

/*
 * The driver's version ("550.54.15") and the CUDA version it supports
 * ("12.4") for facts, from NVML on its own (loaded, asked, unloaded): a
 * node's driver is a fact whichever card vendor the agent samples with.
 * "none" for both without libnvidia-ml or when NVML does not start.
 */
void nvml_versions(char *driver, size_t dcap, char *cuda, size_t ccap)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	nvmlReturn_t (*init)(void) = NULL, (*shutdown)(void) = NULL;
	nvmlReturn_t (*drv)(char *, unsigned int) = NULL;
	nvmlReturn_t (*cu)(int *) = NULL;
	int v = 0;
	snprintf(driver, dcap, "none");
	snprintf(cuda, ccap, "none");
	if (!lib)
		return;
	*(void **)&init = dlsym(lib, "nvmlInit_v2");
	*(void **)&shutdown = dlsym(lib, "nvmlShutdown");
	*(void **)&drv = dlsym(lib, "nvmlSystemGetDriverVersion");
	*(void **)&cu = dlsym(lib, "nvmlSystemGetCudaDriverVersion_v2");
	if (!cu)
		*(void **)&cu = dlsym(lib, "nvmlSystemGetCudaDriverVersion");
	if (init && shutdown && init() == 0) {
		char buf[96] = "";
		if (drv && drv(buf, sizeof buf) == 0 && buf[0])
			snprintf(driver, dcap, "%s", buf);
		if (cu && cu(&v) == 0 && v > 0) /* 12040: 12.4 */
			snprintf(cuda, ccap, "%d.%d", v / 1000, v % 1000 / 10);
		shutdown();
	}
	dlclose(lib);
}
