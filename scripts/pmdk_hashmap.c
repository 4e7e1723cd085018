/*
 * The persisted-hashmap experiment's PMDK variant: the toolkit's hash map
 * (same 16-byte slots, SplitMix64 hashing, linear probing, seal word) run on
 * libpmemobj, so only the persistence mechanism differs.
 *
 *   pmdk_hashmap tx|atomic|batched N CAPACITY SEED POOL_PATH
 *
 * tx:      each insert in a transaction (pmemobj_tx_add_range_direct);
 * atomic:  store the slot, pmemobj_persist it (the toolkit's one-fence path);
 * batched: store every slot, one pmemobj_persist of the table at the end.
 * Prints `total_ms <ms>`: from the first insert until all are durable.
 * Built by scripts/compare-hashmap.sh (gcc -O2 ... -lpmemobj).
 */
#include <libpmemobj.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slot { uint64_t kv; uint64_t seal; };
struct root { PMEMoid table; uint64_t capacity; };

static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static uint64_t seal_of(uint64_t kv) { return mix(kv ^ 0x5eed5eed5eed5eedULL) | 1; }

/* The i-th pair, as scaledkv-bench draws it. */
static void pair(uint64_t seed, uint64_t i, uint32_t *key, uint32_t *value) {
    uint64_t x = seed + i * 0x9e3779b97f4a7c15ULL;
    x = mix(x);
    *key = (uint32_t)(x >> 32);
    *value = (uint32_t)x;
}

/* The slot `key` goes to: its own, else the first dead one, else the empty one. */
static uint64_t place(struct slot *slots, uint64_t capacity, uint32_t key) {
    uint64_t mask = capacity - 1, index = mix(key) & mask, dead = UINT64_MAX;
    for (uint64_t step = 0; step < capacity; step++, index = (index + 1) & mask) {
        struct slot *s = &slots[index];
        int live = s->seal == seal_of(s->kv);
        if (live && (uint32_t)(s->kv >> 32) == key) return index;
        if (!live && s->seal == 0) return dead != UINT64_MAX ? dead : index;
        if (!live && dead == UINT64_MAX) dead = index;
    }
    if (dead != UINT64_MAX) return dead;
    fprintf(stderr, "table full\n");
    exit(1);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s tx|atomic|batched N CAPACITY SEED POOL_PATH\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    uint64_t n = strtoull(argv[2], NULL, 10), capacity = strtoull(argv[3], NULL, 10);
    uint64_t seed = strtoull(argv[4], NULL, 10);
    size_t pool_bytes = capacity * sizeof(struct slot) + capacity * sizeof(struct slot) / 8 + (16u << 20);
    PMEMobjpool *pop = pmemobj_create(argv[5], "scaledkv-hashmap", pool_bytes, 0644);
    if (!pop) { fprintf(stderr, "pmemobj_create %s: %s\n", argv[5], pmemobj_errormsg()); return 1; }
    struct root *root = pmemobj_direct(pmemobj_root(pop, sizeof(struct root)));
    if (pmemobj_zalloc(pop, &root->table, capacity * sizeof(struct slot), 0)) {
        fprintf(stderr, "pmemobj_zalloc: %s\n", pmemobj_errormsg());
        return 1;
    }
    root->capacity = capacity;
    pmemobj_persist(pop, &root->capacity, sizeof root->capacity);
    struct slot *slots = pmemobj_direct(root->table);

    double started = now_ms();
    for (uint64_t i = 0; i < n; i++) {
        uint32_t key, value;
        pair(seed, i, &key, &value);
        uint64_t index = place(slots, capacity, key);
        uint64_t kv = ((uint64_t)key << 32) | value;
        struct slot *s = &slots[index];
        if (strcmp(mode, "tx") == 0) {
            TX_BEGIN(pop) {
                pmemobj_tx_add_range_direct(s, sizeof *s);
                s->kv = kv;
                s->seal = seal_of(kv);
            } TX_ONABORT {
                fprintf(stderr, "transaction aborted: %s\n", pmemobj_errormsg());
                exit(1);
            } TX_END
        } else {
            s->kv = kv;
            s->seal = seal_of(kv);
            if (strcmp(mode, "atomic") == 0) pmemobj_persist(pop, s, sizeof *s);
        }
    }
    if (strcmp(mode, "batched") == 0) pmemobj_persist(pop, slots, capacity * sizeof(struct slot));
    printf("total_ms %.6f\n", now_ms() - started);
    pmemobj_close(pop);
    return 0;
}
