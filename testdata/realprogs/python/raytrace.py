"""Test workload (never trained on): a small ray tracer (floats, small objects, operator methods).
Usage: python raytrace.py N   (N x N pixels); prints a checksum of the image."""
import sys


class Vec:
    __slots__ = ("x", "y", "z")

    def __init__(self, x, y, z):
        self.x, self.y, self.z = x, y, z

    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y, self.z + o.z)

    def __sub__(self, o):
        return Vec(self.x - o.x, self.y - o.y, self.z - o.z)

    def __mul__(self, k):
        return Vec(self.x * k, self.y * k, self.z * k)

    def dot(self, o):
        return self.x * o.x + self.y * o.y + self.z * o.z

    def norm(self):
        return self * (1.0 / self.dot(self) ** 0.5)


class Sphere:
    def __init__(self, center, radius, color, shine):
        self.center, self.radius, self.color, self.shine = center, radius, color, shine

    def hit(self, origin, direction):
        oc = origin - self.center
        b = oc.dot(direction)
        c = oc.dot(oc) - self.radius * self.radius
        disc = b * b - c
        if disc < 0:
            return None
        t = -b - disc ** 0.5
        return t if t > 1e-4 else None


class Plane:
    def __init__(self, y, color):
        self.y, self.color, self.shine = y, color, 0.1

    def hit(self, origin, direction):
        if abs(direction.y) < 1e-9:
            return None
        t = (self.y - origin.y) / direction.y
        return t if t > 1e-4 else None

    def normal(self, p):
        return Vec(0.0, 1.0, 0.0)


def normal_of(obj, p):
    return obj.normal(p) if isinstance(obj, Plane) else (p - obj.center).norm()


class Scene:
    def __init__(self):
        self.objects = [
            Sphere(Vec(0.0, 1.0, 5.0), 1.0, Vec(0.9, 0.2, 0.2), 0.5),
            Sphere(Vec(-2.0, 0.7, 6.0), 0.7, Vec(0.2, 0.9, 0.3), 0.3),
            Sphere(Vec(1.8, 0.5, 4.0), 0.5, Vec(0.3, 0.3, 0.9), 0.8),
            Plane(0.0, Vec(0.8, 0.8, 0.8)),
        ]
        self.light = Vec(-3.0, 5.0, 1.0)

    def closest(self, origin, direction):
        best, best_t = None, 1e30
        for obj in self.objects:
            t = obj.hit(origin, direction)
            if t is not None and t < best_t:
                best, best_t = obj, t
        return best, best_t

    def trace(self, origin, direction, depth):
        obj, t = self.closest(origin, direction)
        if obj is None:
            return Vec(0.1, 0.1, 0.2)
        p = origin + direction * t
        n = normal_of(obj, p)
        to_light = (self.light - p).norm()
        shadow, st = self.closest(p, to_light)
        lit = 0.0 if shadow is not None and st < (self.light - p).dot(self.light - p) ** 0.5 else max(0.0, n.dot(to_light))
        color = obj.color
        if isinstance(obj, Plane) and (int(p.x + 1000) + int(p.z + 1000)) % 2:
            color = color * 0.5
        out = color * (0.15 + 0.85 * lit)
        if depth > 0 and obj.shine > 0:
            r = direction - n * (2 * direction.dot(n))
            out = out * (1 - obj.shine) + self.trace(p, r.norm(), depth - 1) * obj.shine
        return out


def main():
    n = int(sys.argv[1])
    scene = Scene()
    eye = Vec(0.0, 1.5, 0.0)
    check = 0
    total = 0
    for j in range(n):
        for i in range(n):
            d = Vec((i - n / 2) / n, (n / 2 - j) / n, 1.0).norm()
            c = scene.trace(eye, d, 2)
            r, g, b = (min(255, int(255 * v)) for v in (c.x, c.y, c.z))
            total += r + g + b
            check = (check * 31 + r * 65536 + g * 256 + b) % 1000000007
    print(f"raytrace {n}x{n}: total {total}, checksum {check}")


if __name__ == "__main__":
    main()
