/* LTTng-UST tracepoint with the same payload as Loupe::App::Progress (bench/trace_cost.py). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER loupe_bench
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./tp.h"
#if !defined(LOUPE_BENCH_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define LOUPE_BENCH_TP_H
#include <lttng/tracepoint.h>
LTTNG_UST_TRACEPOINT_EVENT(loupe_bench, progress,
    LTTNG_UST_TP_ARGS(uint64_t, units, double, rate, const char *, label, const int32_t *, deltas, size_t, n),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_integer(uint64_t, units, units)
        lttng_ust_field_float(double, rate, rate)
        lttng_ust_field_string(label, label)
        lttng_ust_field_sequence(int32_t, deltas, deltas, size_t, n)))
#endif
#include <lttng/tracepoint-event.h>
