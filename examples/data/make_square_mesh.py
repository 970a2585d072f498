"""Writes square.msh, the mesh of examples/poisson_mesh.cpp: the unit square as an unstructured
triangle mesh in Gmsh's MSH 2.2 ASCII format (what `gmsh -2 -format msh22` writes), with the
boundary edges as 2-node line elements of physical group 1 and the triangles in group 2.

The points of an (m+1) x (m+1) grid are jittered off the lines (boundary points slide along their
edge only), each cell is cut along a random diagonal, and nodes and triangles are numbered in a
random order, so nothing about the numbering is structured. Seeded: reruns give the same file.

    python3 make_square_mesh.py [m] > square.msh
"""

import random
import sys

m = int(sys.argv[1]) if len(sys.argv) > 1 else 20
rng = random.Random(18)
h = 1.0 / m

points = {}
for j in range(m + 1):
    for i in range(m + 1):
        x, y = i * h, j * h
        if 0 < i < m:
            x += rng.uniform(-0.25, 0.25) * h
        if 0 < j < m:
            y += rng.uniform(-0.25, 0.25) * h
        points[(i, j)] = (x, y)

order = list(points)
rng.shuffle(order)
number = {key: n + 1 for n, key in enumerate(order)}

triangles = []
for j in range(m):
    for i in range(m):
        a, b, c, d = number[(i, j)], number[(i + 1, j)], number[(i + 1, j + 1)], number[(i, j + 1)]
        if rng.random() < 0.5:
            triangles += [(a, b, c), (a, c, d)]
        else:
            triangles += [(a, b, d), (b, c, d)]
rng.shuffle(triangles)

edges = []
for k in range(m):
    edges += [(number[(k, 0)], number[(k + 1, 0)]), (number[(m, k)], number[(m, k + 1)]),
              (number[(k + 1, m)], number[(k, m)]), (number[(0, k + 1)], number[(0, k)])]

out = sys.stdout
out.write("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n")
out.write("$Nodes\n%d\n" % len(order))
for n, key in enumerate(order):
    x, y = points[key]
    out.write("%d %.12g %.12g 0\n" % (n + 1, x, y))
out.write("$EndNodes\n$Elements\n%d\n" % (len(edges) + len(triangles)))
e = 0
for a, b in edges:
    e += 1
    out.write("%d 1 2 1 1 %d %d\n" % (e, a, b))
for a, b, c in triangles:
    e += 1
    out.write("%d 2 2 2 2 %d %d %d\n" % (e, a, b, c))
out.write("$EndElements\n")
