"""A workload that removes the folder diagnose is writing its capture into (tests/test_system_failures.py).

diagnose -o PARENT/out removes_output.py PARENT
"""

import glob
import os
import shutil
import sys

import torch

for staging in glob.glob(os.path.join(sys.argv[1], ".*diagnose-staging-*")):
    shutil.rmtree(staging, ignore_errors=True)

x = torch.ones(4)
for _ in range(3):
    x = x * 2
