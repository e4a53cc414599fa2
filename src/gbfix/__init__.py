"""gbfix: find torch.compile graph breaks, rewrite the source to remove them, prove each rewrite."""

__version__ = "0.1.0"
