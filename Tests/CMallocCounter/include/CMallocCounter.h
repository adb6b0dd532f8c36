/* Test support: counts heap allocations made by the calling thread while counting is on. */
#ifndef C_MALLOC_COUNTER_H
#define C_MALLOC_COUNTER_H
#include <stdint.h>
void malloc_counter_start(void);
/* Stops counting and returns the allocations counted since start. */
uint64_t malloc_counter_stop(void);
#endif
