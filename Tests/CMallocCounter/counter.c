/*
 * Interposes the allocator for the whole test executable (its definitions win over libc's) and
 * forwards to glibc's own entry points. Counting is per thread, so tests running in parallel on
 * other threads do not disturb a measurement.
 */
#include "CMallocCounter.h"

#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread int counting;
static __thread uint64_t allocations;

static void count(void)
{
    if (counting)
        allocations++;
}

void malloc_counter_start(void)
{
    allocations = 0;
    counting = 1;
}

uint64_t malloc_counter_stop(void)
{
    counting = 0;
    return allocations;
}

void *malloc(size_t size)
{
    count();
    return __libc_malloc(size);
}

void *calloc(size_t count_, size_t size)
{
    count();
    return __libc_calloc(count_, size);
}

void *realloc(void *pointer, size_t size)
{
    count();
    return __libc_realloc(pointer, size);
}

void *memalign(size_t alignment, size_t size)
{
    count();
    return __libc_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size)
{
    count();
    return __libc_memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
    void *p;
    count();
    p = __libc_memalign(alignment, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *pointer)
{
    __libc_free(pointer);
}
