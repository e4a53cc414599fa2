import functools
import warnings


def deprecated_kwarg(old, new):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if old in kwargs:
                warnings.warn(f"`{old}` is deprecated, use `{new}`", DeprecationWarning)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return wrapper
    return deco


def check_finite(t, name):
    assert not t.isnan().any(), f"{name} has NaNs"
