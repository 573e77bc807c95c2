! test_api.F90: the free-form twin of test_api.F, written against scrf.h
! (compiled with -DUSE_SCR_MODULE it uses the scr module instead, whose
! explicit interfaces check every call). Same arguments and output lines:
!
!   test_api STEPS [CRASH_AFTER [OUTPUT_STEP [HEADER]]]
!
! HEADER=1: rank 0 also writes CKPT/header.dat through SCR_ROUTE_SHARED_FILE,
! and at restart every rank lists the checkpoint (SCR_RESTART_INFO,
! SCR_RESTART_FILE), finds its own file and the header in the list, and
! reads the header: LISTED writers=W files=F own=1 header=1.
!
! plus CONFIG lines for a VAL too short for its value (the call fails
! and says so), the version, and the blank name of SCR_HAVE_RESTART when
! there is no checkpoint. With -DMIXED and mixed.c it also calls the C API
! from C after SCR_INIT (MIXED c_sees_init=1: one runtime for both).
program test_api_f90
  use mpi
#ifdef USE_SCR_MODULE
  use scr
#endif
  implicit none
#ifndef USE_SCR_MODULE
  include 'scrf.h'
#endif
  integer, parameter :: n = 4096
  integer :: buf(n)
  integer :: ierr, rank, flag, valid, i, step, first, last, ios
  integer :: steps, crash, outstep, flags
  integer :: header, writers, nfiles, writer, j, got(2), both(2)
  integer :: hbuf(16)
  character(len=SCR_MAX_FILENAME) :: path
  character(len=64) :: arg, name
  character(len=256) :: fname
  character(len=SCR_MAX_FILENAME) :: ckpt, routed, val
  character(len=4) :: short
  character(len=64) :: version

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  steps = 1
  crash = 0
  outstep = 0
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) steps
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) crash
  end if
  if (command_argument_count() >= 3) then
    call get_command_argument(3, arg)
    read (arg, *) outstep
  end if
  header = 0
  if (command_argument_count() >= 4) then
    call get_command_argument(4, arg)
    read (arg, *) header
  end if

  call SCR_CONFIG('SCR_CACHE_SIZE= 3', ' ', ierr)
  call SCR_CONFIG('SCR_CACHE_SIZE', val, ierr)
  if (rank == 0) write (*, '(A,A,A,I0,A,L1)') 'CONFIG SCR_CACHE_SIZE=[', trim(val), '] ierr=', ierr, &
    ' padded=', val(2:) == ' '
  val = 'garbage'
  call SCR_CONFIG('SCR_CHECKPOINT_SECONDS', val, ierr)
  if (rank == 0) write (*, '(A,L1,A,I0)') 'CONFIG unset_blank=', val == ' ', ' ierr=', ierr
  call SCR_CONFIG('SCR_FLUSH=often', ' ', ierr)
  if (rank == 0) write (*, '(A,L1)') 'CONFIG bad_value_fails=', ierr /= SCR_SUCCESS
  ! SCR_CNTL_BASE is a path longer than 4 characters
  call SCR_CONFIG('SCR_CNTL_BASE', short, ierr)
  if (rank == 0) write (*, '(A,L1)') 'CONFIG short_val_fails=', ierr /= SCR_SUCCESS
  call SCR_GET_VERSION(version, ierr)
  if (rank == 0) write (*, '(A,A)') 'VERSION ', trim(version)

  call SCR_INIT(ierr)
  if (ierr /= SCR_SUCCESS) then
    if (rank == 0) write (*, '(A)') 'SCR_INIT_FAILED'
    call MPI_ABORT(MPI_COMM_WORLD, 3, ierr)
  end if

#ifdef MIXED
  ! built with mixed.c: a C call after the Fortran SCR_INIT (one runtime serves both)
  call c_have_restart(flag)
  if (rank == 0) write (*, '(A,I0)') 'MIXED c_sees_init=', flag
#endif

  first = 1
  ckpt = 'garbage'
  call SCR_HAVE_RESTART(flag, ckpt, ierr)
  if (flag == 1) then
    call SCR_START_RESTART(ckpt, ierr)
    read (ckpt(6:), *) step
    write (fname, '(A,A,I0,A)') trim(ckpt), '/rank_', rank, '.dat'
    call SCR_ROUTE_FILE(fname, routed, ierr)
    valid = 0
    if (ierr == SCR_SUCCESS) then
      open (unit=10, file=routed, access='stream', form='unformatted', action='read', iostat=ios)
      if (ios == 0) then
        read (10, iostat=ios) buf
        close (10)
        if (ios == 0) valid = merge(1, 0, all(buf == [(rank * 1000000 + step * 10000 + i, i = 1, n)]))
      end if
    end if
    if (header == 1) then
      call SCR_RESTART_INFO(writers, nfiles, ierr)
      got = 0
      do j = 0, nfiles - 1
        call SCR_RESTART_FILE(j, path, writer, ierr)
        if (ierr /= SCR_SUCCESS) exit
        if (writer == rank .and. index(path, '/' // trim(fname)) > 0) got(1) = 1
        if (writer == -1 .and. index(path, '/header.dat') > 0) then
          call SCR_ROUTE_FILE(path, routed, ierr)
          open (unit=12, file=routed, access='stream', form='unformatted', action='read', iostat=ios)
          if (ios == 0) then
            read (12, iostat=ios) hbuf
            close (12)
            if (ios == 0) got(2) = merge(1, 0, all(hbuf == [(step * 100 + i, i = 1, 16)]))
          end if
        end if
      end do
      call MPI_ALLREDUCE(got, both, 2, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
      if (rank == 0) write (*, '(A,I0,A,I0,A,I0,A,I0)') 'LISTED writers=', writers, ' files=', nfiles, &
        ' own=', both(1), ' header=', both(2)
      valid = valid * both(1) * both(2)
    end if
    call SCR_COMPLETE_RESTART(valid, ierr)
    if (ierr == SCR_SUCCESS) then
      if (rank == 0) write (*, '(A,A,A,I0)') 'RESTARTED ', trim(ckpt), ' step=', step
      first = step + 1
    else
      if (rank == 0) write (*, '(A)') 'RESTART_FAILED'
    end if
  else
    if (rank == 0) write (*, '(A,L1)') 'NO_RESTART name_blank=', ckpt == ' '
  end if

  last = first + steps - 1
  do step = first, last
    call SCR_NEED_CHECKPOINT(flag, ierr)
    write (name, '(A,I0)') 'ckpt.', step
    flags = SCR_FLAG_CHECKPOINT
    if (step == outstep) flags = flags + SCR_FLAG_OUTPUT
    call SCR_START_OUTPUT(name, flags, ierr)
    write (fname, '(A,A,I0,A)') trim(name), '/rank_', rank, '.dat'
    call SCR_ROUTE_FILE(fname, routed, ierr)
    buf = [(rank * 1000000 + step * 10000 + i, i = 1, n)]
    valid = 0
    if (ierr == SCR_SUCCESS) then
      open (unit=11, file=routed, access='stream', form='unformatted', action='write', status='replace', &
        iostat=ios)
      if (ios == 0) then
        write (11, iostat=ios) buf
        if (ios == 0) valid = 1
        close (11)
      end if
    end if
    if (header == 1 .and. rank == 0) then
      ! rank 0 alone writes a file straight to the prefix (a shared file of one writer)
      call SCR_ROUTE_SHARED_FILE(trim(name) // '/header.dat', path, ierr)
      if (ierr /= SCR_SUCCESS) valid = 0
      open (unit=13, file=path, access='stream', form='unformatted', action='write', status='replace', &
        iostat=ios)
      if (ios == 0) then
        write (13, iostat=ios) [(step * 100 + i, i = 1, 16)]
        close (13)
      end if
      if (ios /= 0) valid = 0
    end if
    call SCR_COMPLETE_OUTPUT(valid, ierr)
    if (rank == 0) write (*, '(A,A,A,I0)') 'CHECKPOINT ', trim(name), ' ok=', merge(1, 0, ierr == SCR_SUCCESS)
    if (step == crash) then
      if (rank == 0) write (*, '(A,A)') 'CRASH after ', trim(name)
      flush (6)
      ! every rank's output is out before the first one exits
      call MPI_BARRIER(MPI_COMM_WORLD, ierr)
      call exit(9)
    end if
    call SCR_SHOULD_EXIT(flag, ierr)
    if (flag == 1) exit
  end do

  call SCR_FINALIZE(ierr)
  if (rank == 0) write (*, '(A,I0,A,I0)') 'DONE steps=', first, '..', last
  call MPI_FINALIZE(ierr)
end program test_api_f90
