import { Route } from './state';

/** What a page gets: its route, the shared filters, where to draw, and how to move on. */
export interface Ctx {
  route: Route;
  filters: URLSearchParams;
  main: HTMLElement;
  nav(r: Route): void;
}
