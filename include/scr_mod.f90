! scr_mod.f90: module scr, the SCR Fortran interface with explicit
! interfaces, so the compiler checks every call's arguments.
!     use scr
! instead of  include 'scrf.h'  (never both in one scope). The
! constants are those of scrf.h; the subroutines are libscrf's
! (link with -lscrf). scripts/libscrf.sh compiles this file into
! scr.mod with gfortran; other compilers compile it themselves.
module scr
  implicit none
  include 'scrf.h'

  interface
    subroutine scr_init(ierror)
      integer, intent(out) :: ierror
    end subroutine scr_init

    subroutine scr_finalize(ierror)
      integer, intent(out) :: ierror
    end subroutine scr_finalize

    subroutine scr_config(config, val, ierror)
      character(len=*), intent(in) :: config
      ! no INTENT: a query writes VAL, a set or unset leaves it alone
      ! (so it may be a constant there)
      character(len=*) :: val
      integer, intent(out) :: ierror
    end subroutine scr_config

    subroutine scr_need_checkpoint(flag, ierror)
      integer, intent(out) :: flag, ierror
    end subroutine scr_need_checkpoint

    subroutine scr_start_output(name, flags, ierror)
      character(len=*), intent(in) :: name
      integer, intent(in) :: flags
      integer, intent(out) :: ierror
    end subroutine scr_start_output

    subroutine scr_route_file(name, file, ierror)
      character(len=*), intent(in) :: name
      character(len=*), intent(out) :: file
      integer, intent(out) :: ierror
    end subroutine scr_route_file

    subroutine scr_route_shared_file(name, file, ierror)
      character(len=*), intent(in) :: name
      character(len=*), intent(out) :: file
      integer, intent(out) :: ierror
    end subroutine scr_route_shared_file

    subroutine scr_complete_output(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine scr_complete_output

    subroutine scr_start_checkpoint(ierror)
      integer, intent(out) :: ierror
    end subroutine scr_start_checkpoint

    subroutine scr_complete_checkpoint(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine scr_complete_checkpoint

    subroutine scr_have_restart(flag, name, ierror)
      integer, intent(out) :: flag
      character(len=*), intent(out) :: name
      integer, intent(out) :: ierror
    end subroutine scr_have_restart

    subroutine scr_start_restart(name, ierror)
      character(len=*), intent(out) :: name
      integer, intent(out) :: ierror
    end subroutine scr_start_restart

    subroutine scr_complete_restart(valid, ierror)
      integer, intent(in) :: valid
      integer, intent(out) :: ierror
    end subroutine scr_complete_restart

    subroutine scr_restart_info(ranks, nfiles, ierror)
      integer, intent(out) :: ranks, nfiles, ierror
    end subroutine scr_restart_info

    subroutine scr_restart_file(i, name, writer, ierror)
      integer, intent(in) :: i
      character(len=*), intent(out) :: name
      integer, intent(out) :: writer, ierror
    end subroutine scr_restart_file

    subroutine scr_get_version(version, ierror)
      character(len=*), intent(out) :: version
      integer, intent(out) :: ierror
    end subroutine scr_get_version

    subroutine scr_should_exit(flag, ierror)
      integer, intent(out) :: flag, ierror
    end subroutine scr_should_exit

    subroutine scr_current(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine scr_current

    subroutine scr_delete(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine scr_delete

    subroutine scr_drop(name, ierror)
      character(len=*), intent(in) :: name
      integer, intent(out) :: ierror
    end subroutine scr_drop
  end interface
end module scr
