"""Training workload: recursion and generators (n-queens, tree walks, partitions, permutations).
Usage: python recur.py N   (N = problem size, 6..9); prints a checksum."""
import sys


def queens(n, row=0, cols=(), diag1=(), diag2=()):
    if row == n:
        yield cols
        return
    for c in range(n):
        if c not in cols and row + c not in diag1 and row - c not in diag2:
            yield from queens(n, row + 1, cols + (c,), diag1 + (row + c,), diag2 + (row - c,))


class Node:
    __slots__ = ("key", "left", "right")

    def __init__(self, key, left=None, right=None):
        self.key, self.left, self.right = key, left, right


def build(lo, hi):
    if lo > hi:
        return None
    mid = (lo + hi) // 2
    return Node(mid, build(lo, mid - 1), build(mid + 1, hi))


def inorder(node):
    if node is not None:
        yield from inorder(node.left)
        yield node.key
        yield from inorder(node.right)


def depth_sum(node, d=0):
    return 0 if node is None else d + depth_sum(node.left, d + 1) + depth_sum(node.right, d + 1)


def partitions(n, largest=None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for k in range(min(n, largest), 0, -1):
        for rest in partitions(n - k, k):
            yield (k,) + rest


def permutations(items):
    if len(items) <= 1:
        yield list(items)
        return
    for i in range(len(items)):
        for p in permutations(items[:i] + items[i + 1:]):
            yield [items[i]] + p


def ackermann_small(m, n):
    if m == 0:
        return n + 1
    if n == 0:
        return ackermann_small(m - 1, 1)
    return ackermann_small(m - 1, ackermann_small(m, n - 1))


def main():
    n = int(sys.argv[1])
    check = 0
    sols = 0
    for s in queens(n):
        sols += 1
        check = (check * 31 + sum(i * c for i, c in enumerate(s))) % 1000000007
    tree = build(0, 2 ** (n + 7))
    total = sum(inorder(tree))
    ds = depth_sum(tree)
    parts = 0
    for p in partitions(3 * n + 12):
        parts += 1
        check = (check + len(p) * p[0]) % 1000000007
    perms = 0
    for p in permutations(list(range(n))):
        perms += 1
        check = (check * 7 + p[0] * 3 + p[-1]) % 1000000007
    ack = ackermann_small(2, 20 * n)
    print(f"recur {n}: {sols} queens, tree sum {total} depth {ds}, {parts} partitions, {perms} permutations, ack {ack}, checksum {check}")


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
