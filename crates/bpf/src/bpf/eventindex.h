/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which of the daemon's events a sample belongs to.
 *
 * The daemon attaches the program to each event with the event's index as
 * the BPF cookie. The kernel keeps the cookie on the event it was attached
 * to only: an event it inherits into a thread or child created later
 * (`inherit`, as for a command or -p) runs the same program with a cookie
 * of 0, so every inherited sample would count as the first event's. An
 * inherited event points at the event it was copied from (`parent`, always
 * the original one), whose cookie is the index.
 */
#pragma once

#include <bpf/bpf_core_read.h>

static __always_inline __u16 event_index(struct bpf_perf_event_data *ctx)
{
	struct bpf_perf_event_data_kern *kctx = (void *)ctx;
	struct perf_event *event = BPF_CORE_READ(kctx, event);
	struct perf_event *parent = event ? BPF_CORE_READ(event, parent) : 0;

	if (parent)
		return (__u16)BPF_CORE_READ(parent, bpf_cookie);
	return (__u16)bpf_get_attach_cookie(ctx);
}
