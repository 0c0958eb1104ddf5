"""Training workload: a discrete-event job-shop simulation (objects, method calls, a hand-written heap).
Usage: python sched.py N   (N jobs); prints a checksum."""
import sys


class Rng:
    """Linear congruential generator: the same numbers on every run and build."""
    def __init__(self, seed):
        self.state = seed

    def next(self, n):
        self.state = (self.state * 1103515245 + 12345) & 0x7FFFFFFF
        return self.state % n


class Heap:
    def __init__(self):
        self.items = []

    def push(self, item):
        a = self.items
        a.append(item)
        i = len(a) - 1
        while i > 0:
            p = (i - 1) >> 1
            if a[p] <= a[i]:
                break
            a[p], a[i] = a[i], a[p]
            i = p

    def pop(self):
        a = self.items
        top = a[0]
        last = a.pop()
        if a:
            a[0] = last
            i, n = 0, len(a)
            while True:
                c = 2 * i + 1
                if c >= n:
                    break
                if c + 1 < n and a[c + 1] < a[c]:
                    c += 1
                if a[i] <= a[c]:
                    break
                a[i], a[c] = a[c], a[i]
                i = c
        return top

    def __len__(self):
        return len(self.items)


class Job:
    __slots__ = ("ident", "priority", "steps", "done", "waited")

    def __init__(self, ident, priority, steps):
        self.ident = ident
        self.priority = priority
        self.steps = steps
        self.done = 0
        self.waited = 0

    def finished(self):
        return self.done >= len(self.steps)


class Machine:
    def __init__(self, kind, speed):
        self.kind = kind
        self.speed = speed
        self.busy_until = 0
        self.queue = []
        self.work = 0

    def enqueue(self, job):
        self.queue.append(job)

    def pick(self):
        best = 0
        for i in range(1, len(self.queue)):
            if self.queue[i].priority > self.queue[best].priority:
                best = i
        return self.queue.pop(best)


class Shop:
    def __init__(self, rng, kinds, per_kind):
        self.rng = rng
        self.machines = {k: [Machine(k, 1 + rng.next(3)) for _ in range(per_kind)] for k in range(kinds)}
        self.events = Heap()
        self.seq = 0
        self.completed = 0
        self.checksum = 0

    def schedule(self, when, action, arg):
        self.seq += 1
        self.events.push((when, self.seq, action, arg))

    def submit(self, now, job):
        kind = job.steps[job.done][0]
        machines = self.machines[kind]
        m = min(machines, key=lambda m: (len(m.queue), m.busy_until))
        m.enqueue(job)
        if m.busy_until <= now:
            self.schedule(now, "start", m)

    def start(self, now, m):
        if not m.queue or m.busy_until > now:
            return
        job = m.pick()
        cost = job.steps[job.done][1]
        took = (cost + m.speed - 1) // m.speed
        m.busy_until = now + took
        m.work += took
        self.schedule(m.busy_until, "finish", (m, job))

    def finish(self, now, arg):
        m, job = arg
        job.done += 1
        if job.finished():
            self.completed += 1
            self.checksum = (self.checksum * 31 + job.ident * 7 + now) % 1000000007
        else:
            self.submit(now, job)
        self.schedule(now, "start", m)

    def run(self):
        now = 0
        while self.events:
            now, _, action, arg = self.events.pop()
            getattr(self, action)(now, arg)
        return now


def main():
    n = int(sys.argv[1])
    rng = Rng(42)
    shop = Shop(rng, kinds=5, per_kind=3)
    for i in range(n):
        steps = [(rng.next(5), 1 + rng.next(20)) for _ in range(2 + rng.next(5))]
        job = Job(i, rng.next(10), steps)
        shop.schedule(rng.next(n * 4), "submit", job)
    end = shop.run()
    work = sum(m.work for ms in shop.machines.values() for m in ms)
    print(f"sched {n}: completed {shop.completed} at {end}, work {work}, checksum {shop.checksum}")


if __name__ == "__main__":
    main()
