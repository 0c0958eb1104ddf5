// Canvas icicle renderer: one canvas, no DOM node per frame, so 100k-node trees stay smooth.
// Layout comes from tree.ts; this file only draws and maps the mouse back to frames.
import { FNode, layout, nameColour, Rect, search } from './tree';

const ROW = 18;

export interface FlameOptions {
  /** Fill of a frame; defaults to a stable colour per name. */
  colour?: (n: FNode) => string;
  /** Called after a click zoomed to a frame. */
  onFocus?: (n: FNode) => void;
  /** Text shown when hovering a frame. */
  describe?: (n: FNode, root: FNode) => string;
}

export class FlameView {
  readonly canvas: HTMLCanvasElement;
  private readonly tip: HTMLDivElement;
  private root: FNode | null = null;
  private focus: FNode | null = null;
  private rects: Rect[] = [];
  private matched = new Set<FNode>();
  private frame = 0;

  constructor(private readonly host: HTMLElement, private readonly opts: FlameOptions = {}) {
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'flame-canvas';
    this.tip = document.createElement('div');
    this.tip.className = 'flame-tip';
    this.tip.hidden = true;
    host.append(this.canvas, this.tip);
    this.canvas.addEventListener('click', (e) => this.click(e));
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => (this.tip.hidden = true));
    new ResizeObserver(() => this.schedule()).observe(host);
  }

  setTree(root: FNode): void {
    this.root = root;
    this.focus = root;
    this.matched.clear();
    this.schedule();
  }

  setFocus(n: FNode): void {
    this.focus = n;
    this.schedule();
    this.opts.onFocus?.(n);
  }

  get focused(): FNode | null {
    return this.focus;
  }

  /** Highlights frames whose name contains `query`; returns the matches and their samples. */
  setSearch(query: string): { count: number; samples: number } {
    if (!this.root) return { count: 0, samples: 0 };
    const m = search(this.root, query);
    this.matched = m.nodes;
    this.schedule();
    return { count: m.nodes.size, samples: m.samples };
  }

  /** Where a frame of this name is drawn now, in page pixels (the widest one), or null. */
  rectOf(name: string): { x: number; y: number; w: number; h: number; highlighted: boolean; fill: string } | null {
    this.draw();
    const box = this.canvas.getBoundingClientRect();
    let best: Rect | null = null;
    for (const r of this.rects) if (r.node.name === name && (!best || r.w > best.w)) best = r;
    if (!best) return null;
    return { x: box.left + best.x * box.width, y: box.top + best.depth * ROW, w: best.w * box.width, h: ROW, highlighted: this.matched.has(best.node), fill: this.fill(best.node) };
  }

  /** Names of the frames drawn highlighted now. */
  highlighted(): string[] {
    this.draw();
    return this.rects.filter((r) => this.matched.has(r.node)).map((r) => r.node.name);
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private draw(): void {
    const width = this.host.clientWidth || 800;
    if (!this.root || !this.focus) return;
    // Frames under half a pixel are not laid out: the tree's size does not limit drawing speed.
    this.rects = layout(this.focus, 0.5 / width);
    const depth = this.rects.reduce((d, r) => Math.max(d, r.depth), 0) + 1;
    const height = depth * ROW;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    const ctx = this.canvas.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.font = '12px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    const searching = this.matched.size > 0;
    for (const r of this.rects) this.drawRect(ctx, r, width, searching);
  }

  private drawRect(ctx: CanvasRenderingContext2D, r: Rect, width: number, searching: boolean): void {
    const x = r.x * width, w = r.w * width, y = r.depth * ROW;
    const hit = this.matched.has(r.node);
    ctx.fillStyle = hit ? '#e040fb' : this.fill(r.node);
    ctx.globalAlpha = searching && !hit ? 0.35 : 1;
    ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
    ctx.globalAlpha = 1;
    if (w < 30) return;
    ctx.fillStyle = '#111';
    const label = r.node.name;
    const fit = Math.floor((w - 6) / 6.5);
    ctx.fillText(label.length > fit ? `${label.slice(0, Math.max(fit - 1, 1))}…` : label, x + 3, y + ROW / 2);
  }

  private fill(n: FNode): string {
    return this.opts.colour ? this.opts.colour(n) : nameColour(n.name, n.image);
  }

  private at(e: MouseEvent): Rect | null {
    const box = this.canvas.getBoundingClientRect();
    const fx = (e.clientX - box.left) / box.width;
    const depth = Math.floor((e.clientY - box.top) / ROW);
    return this.rects.find((r) => r.depth === depth && fx >= r.x && fx < r.x + r.w) ?? null;
  }

  private click(e: MouseEvent): void {
    const r = this.at(e);
    if (r) this.setFocus(r.node);
  }

  private hover(e: MouseEvent): void {
    const r = this.at(e);
    if (!r || !this.root) {
      this.tip.hidden = true;
      return;
    }
    const d = this.opts.describe?.(r.node, this.root) ?? defaultDescribe(r.node, this.root);
    this.tip.textContent = d;
    this.tip.hidden = false;
    const box = this.host.getBoundingClientRect();
    this.tip.style.left = `${Math.min(e.clientX - box.left + 12, box.width - 260)}px`;
    this.tip.style.top = `${e.clientY - box.top + 14}px`;
  }
}

export function defaultDescribe(n: FNode, root: FNode): string {
  const pct = root.total ? ((100 * n.total) / root.total).toFixed(2) : '0';
  return `${n.name}${n.image ? ` (${n.image})` : ''}\n${n.total} samples, ${pct}% · self ${n.self}`;
}
