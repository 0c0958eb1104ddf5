// Generated from loupe's OpenAPI document (/api/openapi.json, crates/cli/src/openapi_schemas.rs): do not edit.
// Regenerate: LOUPE_BLESS=1 cargo test --release -p loupe --bin loupe api_types

export interface AnnotateAnswer {
  events: string[];
  image: string;
  instructions: {
    address: string;
    file: string | null;
    instruction: string;
    line: number | null;
    percent: Record<string, number>;
    samples: Record<string, number>;
  }[];
  lines: {
    file: string;
    line: number;
    samples: number;
  }[];
  procedure: string;
  total_samples: Record<string, number>;
}

export interface CalcAnswer {
  blocks?: {
    end: string;
    start: string;
  }[];
  clock?: string;
  cpu_ghz?: number;
  edges?: {
    from: string;
    to: string;
  }[];
  epochs?: string;
  event: string;
  image: string;
  instructions: {
    address: string;
    confidence?: string;
    cpi: number | null;
    culprits?: {
      cause: string;
    }[];
    executions: number | null;
    instruction: string;
    min_cycles?: number;
    samples: number;
    stall?: number;
  }[];
  model?: string;
  period_cycles?: number;
  procedure: string;
}

export interface DataAnswer {
  rows?: (Record<string, unknown>)[];
  source?: string | null;
}

export interface Decision {
  action: string;
  build_id: string;
  candidate_build_id?: string | null;
  image: string;
  measurement?: Record<string, unknown> | null;
  reason: string;
  replaces?: string;
  unix_time: number;
}

export interface DiffAnswer {
  a_total?: number;
  b_total?: number;
  event?: string;
  level?: number;
  mode: string;
  rows: {
    a: number;
    b: number;
    image?: string | null;
    line?: string | null;
    lock?: string;
    p_value: number | null;
    procedure?: string | null;
    q_value?: number | null;
    score: number | null;
    significant: boolean;
  }[];
}

export interface Epoch {
  current: boolean;
  end: string | null;
  end_unix_ns: number | null;
  events: Record<string, number>;
  host: string | null;
  id: number;
  images: Record<string, number>;
  kernel: string | null;
  lost: number;
  samples: number;
  start: string;
  start_unix_ns: number;
}

export type EpochsAnswer = Epoch[];

export interface Error {
  error: string;
}

export interface FlameAnswer {
  epochs: number[];
  event: string;
  inverted: boolean;
  root: FlameNode;
  total: number;
  unwind_stopped: number;
}

/** A frame reached by one path from the root (the root: `all`, without image). With `min-share`, the children below that share of all samples are folded into one last child named `(other)`, without image, whose self and total are their samples; every other node's figures are exact. */
export interface FlameNode {
  children: FlameNode[];
  image?: string;
  inlined?: boolean;
  name: string;
  self: number;
  total: number;
}

export interface Lock {
  acquisitions: number;
  address: string;
  held_fraction: number;
  hold_ns: number;
  kind: string;
  max_hold_ns: number;
  max_wait_ns: number;
  name: string;
  pid: number;
  wait_fraction: number;
  wait_ns: number;
}

export interface LocksAnswer {
  dropped: number;
  duration_s: number;
  locks: Lock[];
}

export interface OptimizeStatusAnswer {
  decisions: Decision[];
  image: string;
  installed: boolean;
  original: string | null;
}

export interface StatsAnswer {
  event: string;
  rows: {
    image?: string | null;
    line?: string | null;
    lock?: string;
    max: number;
    mean: number;
    min: number;
    n: number;
    p_value: number | null;
    percent: number;
    procedure?: string | null;
    range_percent: number;
    significant: boolean;
    std_dev: number;
    sum: number;
  }[];
  sets: number[];
  total: number;
}

export interface TopAnswer {
  callees?: {
    percent: number;
    procedure: string;
    samples: number;
  }[];
  callers?: {
    percent: number;
    procedure: string;
    samples: number;
  }[];
  event?: string | null;
  events?: string[];
  inclusive?: number;
  procedure?: string;
  rows?: {
    address?: string | null;
    counts?: Record<string, number>;
    image?: string;
    inclusive?: number;
    inclusive_percent?: number;
    line?: string | null;
    percent?: number;
    procedure?: string | null;
    samples?: number;
    self?: number;
    self_percent?: number;
  }[];
  self?: number;
  total_samples: number;
  truncated_samples?: number;
  unknown_samples?: number;
  unnamed_samples?: Record<string, number>;
}

/** Each `/api/<command>` path's JSON answer. */
export interface Answers {
  'annotate': AnnotateAnswer;
  'calc': CalcAnswer;
  'data/classify': DataAnswer;
  'data/profile': DataAnswer;
  'data/workingset': DataAnswer;
  'diff': DiffAnswer;
  'epochs': EpochsAnswer;
  'flame': FlameAnswer;
  'locks': LocksAnswer;
  'optimize/status': OptimizeStatusAnswer;
  'stats': StatsAnswer;
  'top': TopAnswer;
}
