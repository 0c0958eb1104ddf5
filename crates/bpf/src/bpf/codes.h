/* Generated from src/codes.in by build.rs; do not edit. */
#pragma once
#define LOUPE_STAT_SAMPLES 0
#define LOUPE_STAT_CREATED 1
#define LOUPE_STAT_EVICTED 2
#define LOUPE_STAT_DROPPED 3
#define LOUPE_STAT_COUNT 4
