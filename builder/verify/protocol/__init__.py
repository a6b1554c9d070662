"""What crosses the sandbox boundary, imported by both sides: job and result words, tensor files, the timing
window's messages, the comparison rule, the timing plan and the children's entry points. It imports no other layer."""
